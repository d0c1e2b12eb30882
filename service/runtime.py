"""What lives for the whole life of one app instance, created in its lifespan and injected."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from mcp.server import MCPServer
from sqlalchemy.ext.asyncio import AsyncEngine

from service.db.engine import SessionFactory
from service.identity.oauth_provider import DatabaseOAuthProvider
from service.settings import Settings
from service.web.cookies import CookiePolicy
from service.web.csrf import CsrfProtect
from service.web.pages import Pages


@dataclass
class Runtime:
    settings: Settings
    engine: AsyncEngine
    sessions: SessionFactory
    http: httpx.AsyncClient
    oauth: DatabaseOAuthProvider
    mcp: MCPServer
    pages: Pages
    cookies: CookiePolicy
    csrf: CsrfProtect
    migration_head: str | None
