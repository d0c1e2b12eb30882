"""The HTTP answer of an `/mcp` request refused before the SDK sees it: a JSON-RPC error body."""

from __future__ import annotations

from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.responses import Response


def refusal(message: str, *, status_code: int, retry_after: int | None = None) -> Response:
    """`status_code` with a JSON-RPC error (no request id: the body was not read) saying `message`."""
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=INVALID_REQUEST, message=message))
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=status_code,
        headers=headers,
        media_type="application/json",
    )
