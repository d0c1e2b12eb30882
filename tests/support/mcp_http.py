"""Raw MCP-over-HTTP probes, for checks the SDK client hides behind its own error handling."""

from __future__ import annotations

from typing import Any

from tests.support.service import RunningService

INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"


async def post_initialize(
    service: RunningService, authorization: str | bytes | None
) -> tuple[int, dict[str, str]]:
    # httpx's types take str or bytes headers, not both in one mapping: all bytes, a str encoded in
    # ASCII as httpx itself would.
    headers = {b"Accept": ACCEPT.encode("ascii")}
    if authorization is not None:
        headers[b"Authorization"] = (
            authorization if isinstance(authorization, bytes) else authorization.encode("ascii")
        )
    async with service.http() as http:
        response = await http.post("/mcp", headers=headers, json=INITIALIZE)
    return response.status_code, dict(response.headers)


async def legacy_session(
    service: RunningService, token: str, capabilities: dict[str, Any] | None = None
) -> dict[str, str]:
    """Headers of an initialized 2025-11-25 session (declaring `capabilities`, by default none)."""
    headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT, "Content-Type": "application/json"}
    initialize = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": capabilities or {}}}
    async with service.http() as http:
        opened = await http.post("/mcp", headers=headers, json=initialize)
        assert opened.status_code == 200, opened.text
        headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
        headers["MCP-Protocol-Version"] = initialize["params"]["protocolVersion"]
        ready = await http.post(
            "/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        assert ready.status_code == 202
    return headers
