"""An MCP server middleware that counts and logs every `tools/call`.

It runs inside the SDK's request-state boundary, around params validation and the tool itself, so
it sees every outcome: a result (ok or `isError`), an `InputRequiredResult` (2026-07-28 payment
prompt), a -32042 error (2025-11-25 payment prompt), or any other error. The outcome goes on the
access line of the HTTP request that carried the call; only a call that has none gets a line here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import URL_ELICITATION_REQUIRED, CallToolResult, InputRequiredResult

from service.observability.metrics import UNKNOWN, ServiceMetrics
from service.observability.request_context import CANCELLED, enter_child, leave

logger = logging.getLogger("service.tools")


class ToolCallObserver:
    def __init__(self, metrics: ServiceMetrics, is_tool: Callable[[str], bool]) -> None:
        self._metrics = metrics
        self._is_tool = is_tool

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        name = ctx.params.get("name") if ctx.params else None
        tool = name if isinstance(name, str) and self._is_tool(name) else UNKNOWN
        started = time.perf_counter()
        outcome = "error"
        call, context_token = enter_child()
        try:
            token = get_access_token()
            if token is not None and token.subject:
                call.bind(user_id=token.subject)
            result = await call_next(ctx)
            outcome = _outcome(result, prompted=call.elicitation_id is not None)
            return result
        except MCPError as exc:
            outcome = "elicitation" if exc.error.code == URL_ELICITATION_REQUIRED else "error"
            raise
        except asyncio.CancelledError:  # the client cancelled or left: not a server error
            outcome = CANCELLED
            raise
        finally:
            try:
                seconds = time.perf_counter() - started
                self._metrics.tool_call(tool, outcome, seconds, call.paywall_seconds)
                fields = {
                    "tool": tool,
                    "outcome": outcome,
                    "protocol_version": ctx.protocol_version,
                    "tool_duration_ms": round(seconds * 1000, 2),
                }
                if not call.note(**fields) and logger.isEnabledFor(logging.INFO):
                    logger.info("tool call %s: %s", tool, outcome, extra=fields)
            finally:
                leave(context_token)


def _outcome(result: HandlerResult, *, prompted: bool) -> str:
    """ok, error, or elicitation: the caller was handed a payment link instead of the tool's result."""
    match result:
        case InputRequiredResult() | {"resultType": "input_required"}:
            return "elicitation"
        case CallToolResult(is_error=True) | {"isError": True}:
            return "elicitation" if prompted else "error"
    return "ok"
