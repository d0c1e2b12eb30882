"""An MCP server middleware that refuses to send a `tools/call` result over a size limit.

Every tool's result passes here (our own tools, the billing tools, an upstream's through the
gateway), so the cap holds whatever a tool returns. An oversized result becomes a tool error that
says so; the result itself is dropped.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types import CallToolResult, TextContent
from pydantic import TypeAdapter

logger = logging.getLogger(__name__)

_AS_JSON = TypeAdapter(Any)


def result_size(result: CallToolResult | dict[str, Any]) -> int | None:
    """The bytes a tool result's content and structured content take as JSON text, near enough;
    None for a result that carries neither (such as a payment prompt)."""
    if isinstance(result, CallToolResult):
        content: list[Any] = list(result.content)
        structured = result.structured_content
    else:
        content, structured = result.get("content", []), result.get("structuredContent")
        if not isinstance(content, list):
            return None
    size = 0
    for item in content:
        text = (
            item.text
            if isinstance(item, TextContent)
            else item.get("text")
            if isinstance(item, dict)
            else None
        )
        size += len(text.encode()) if isinstance(text, str) else len(_AS_JSON.dump_json(item))
    if structured is not None:
        size += len(_AS_JSON.dump_json(structured))
    return size


class ToolOutputCap:
    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        result = await call_next(ctx)
        if not isinstance(result, CallToolResult | dict):
            return result
        size = result_size(result)
        if size is None or size <= self._max_bytes:
            return result
        name = ctx.params.get("name") if ctx.params else None
        logger.warning("tool %r returned %d bytes, over the %d-byte cap", name, size, self._max_bytes)
        return CallToolResult(
            content=[
                TextContent(
                    type="text",
                    text=(
                        f"The tool's output ({size} bytes) is over this service's limit of "
                        f"{self._max_bytes} bytes; ask for less (for example a shorter input)."
                    ),
                )
            ],
            is_error=True,
        )
