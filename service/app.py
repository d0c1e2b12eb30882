"""The app factory. Building the app does no I/O; the lifespan creates every resource and injects it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from service.db.engine import create_engine, create_session_factory
from service.db.migrations import head_revision
from service.health.endpoints import router as health_router
from service.identity.endpoints import router as identity_router
from service.identity.oauth_provider import DatabaseOAuthProvider
from service.mcp_server.server import build_mcp_app, build_mcp_server
from service.runtime import Runtime
from service.settings import Settings
from service.web.cookies import CookiePolicy
from service.web.csrf import CsrfProtect
from service.web.database_unavailable import DatabaseUnavailableMiddleware
from service.web.pages import STATIC_DIR, Pages
from service.web.security_headers import SecurityHeadersMiddleware


class LateBoundApp:
    """A mount point whose ASGI app exists only while the lifespan runs.

    The MCP app is built from lifespan resources (engine, OAuth provider), so it cannot exist when
    the routing table is made; requests that arrive outside the lifespan get a 503.
    """

    def __init__(self) -> None:
        self.app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is None:
            if scope["type"] == "http":
                await JSONResponse({"error": "service is starting or stopping"}, status_code=503)(
                    scope, receive, send
                )
            return
        await self.app(scope, receive, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    mcp_mount = LateBoundApp()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(settings.database_url)
        sessions = create_session_factory(engine)
        cookies = CookiePolicy(secure=not settings.is_development)
        secret_key = settings.secret_key.get_secret_value()
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as http:
                oauth = DatabaseOAuthProvider(
                    sessions,
                    public_base_url=settings.public_base_url,
                    resource_url=settings.mcp_resource_url,
                    secret_key=secret_key,
                    access_token_ttl=timedelta(seconds=settings.access_token_ttl_seconds),
                    refresh_token_ttl=timedelta(seconds=settings.refresh_token_ttl_seconds),
                    code_ttl=timedelta(seconds=settings.authorization_code_ttl_seconds),
                )
                mcp = build_mcp_server(settings, oauth, sessions)
                mcp_app = build_mcp_app(mcp, settings)
                # Inside the MCP app's own error middleware, which would otherwise answer 500 first.
                mcp_app.add_middleware(DatabaseUnavailableMiddleware)
                app.state.runtime = Runtime(
                    settings=settings,
                    engine=engine,
                    sessions=sessions,
                    http=http,
                    oauth=oauth,
                    mcp=mcp,
                    pages=Pages(settings.mcp_server_name),
                    cookies=cookies,
                    csrf=CsrfProtect(secret_key, cookies),
                    migration_head=head_revision(settings.database_url),
                )
                async with mcp.session_manager.run():
                    mcp_mount.app = mcp_app
                    try:
                        yield
                    finally:
                        mcp_mount.app = None
        finally:
            await engine.dispose()

    app = FastAPI(
        title=settings.mcp_server_name,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json" if settings.is_development else None,
    )
    app.add_middleware(DatabaseUnavailableMiddleware)
    app.add_middleware(SecurityHeadersMiddleware, hsts=not settings.is_development)
    app.include_router(health_router)
    app.include_router(identity_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    # Last, so our own routes win: /mcp, OAuth metadata, /authorize, /token, /register, /revoke.
    app.mount("/", mcp_mount, name="mcp")
    return app
