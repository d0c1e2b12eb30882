"""Raw MCP-over-HTTP probes, for checks the SDK client hides behind its own error handling."""

from __future__ import annotations

from tests.support.service import RunningService

INITIALIZE = {
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
