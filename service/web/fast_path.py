"""Pure ASGI middleware: `/mcp` requests go straight to the MCP app.

Every tool call is one request to `/mcp`; routing it through FastAPI's exception middleware,
dependency machinery and route table (only to land on the catch-all mount) costs measurable
throughput. Everything else still goes through FastAPI.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class McpFastPathMiddleware:
    def __init__(self, app: ASGIApp, *, mcp: ASGIApp, path: str = "/mcp") -> None:
        self.app = app
        self.mcp = mcp
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == self.path:
            await self.mcp(scope, receive, send)
            return
        await self.app(scope, receive, send)
