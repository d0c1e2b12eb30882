"""Refuses an `/mcp` request that repeats `MCP-Protocol-Version` or `Mcp-Session-Id`.

The SDK routes on the first of each, while a layer reading the last would see another request: a
legacy `initialize` sent with `2025-11-25` then `2026-07-28` would open a session the per-user cap
never counted. Rather than make every layer agree on which copy wins, an ambiguous request gets
HTTP 400 with a JSON-RPC error before any layer or the SDK reads it.
"""

from __future__ import annotations

import logging

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from service.mcp_server.refusal import refusal

logger = logging.getLogger(__name__)

# ASGI servers hand header names over lowercased; the SDK's constants are lowercase already.
_SINGLE_HEADERS = {
    MCP_PROTOCOL_VERSION_HEADER.encode("ascii"): "MCP-Protocol-Version",
    MCP_SESSION_ID_HEADER.encode("ascii"): "Mcp-Session-Id",
}


class RepeatedHeaderRefusal:
    """ASGI layer in front of the per-user caps on `/mcp`: answers 400 to a request carrying
    `MCP-Protocol-Version` or `Mcp-Session-Id` more than once."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            seen: set[bytes] = set()
            for name, _ in scope["headers"]:
                if name not in _SINGLE_HEADERS:
                    continue
                if name in seen:
                    logger.info("refused an MCP request repeating %s", _SINGLE_HEADERS[name])
                    await _repeated(_SINGLE_HEADERS[name])(scope, receive, send)
                    return
                seen.add(name)
        await self.app(scope, receive, send)


def _repeated(header: str) -> Response:
    return refusal(f"The {header} header must be sent at most once.", status_code=400)
