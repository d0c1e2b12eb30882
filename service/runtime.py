"""What lives for the whole life of one app instance, created in its lifespan and injected."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from mcp.server import MCPServer
from sqlalchemy.ext.asyncio import AsyncEngine

from service.billing.plans import PlanCatalog
from service.billing.stripe_gateway import StripeGateway
from service.db.engine import SessionFactory
from service.identity.oauth_provider import DatabaseOAuthProvider
from service.observability.metrics import ServiceMetrics
from service.paywall.bus import CompletionBus
from service.paywall.gate import Paywall
from service.paywall.notifier import SessionNotifier
from service.settings import Settings
from service.stripe_sandbox import Sandbox
from service.web.cookies import CookiePolicy
from service.web.csrf import CsrfProtect
from service.web.pages import Pages
from service.webhooks.processor import WebhookProcessor
from service.webhooks.reconciler import Reconciler


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
    catalog: PlanCatalog
    stripe: StripeGateway
    checkout_domain: str
    bus: CompletionBus
    paywall: Paywall
    notifier: SessionNotifier
    webhooks: WebhookProcessor
    reconciler: Reconciler
    sandbox: Sandbox | None
    metrics: ServiceMetrics
