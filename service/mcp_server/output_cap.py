"""An MCP server middleware that refuses to send a `tools/call` result over a size limit.

Every tool's result passes here (our own tools, the billing tools, an upstream's through the
gateway), so the cap holds whatever a tool returns. It measures the result as it is sent: the
whole JSON, `_meta`, annotations and every other field included, not only the text. An oversized
result becomes a tool error that says so; the result itself is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types import CallToolResult, TextContent
from pydantic import TypeAdapter

logger = logging.getLogger(__name__)

OnRefused = Callable[[], Awaitable[None]]
# What to do if the cap refuses the result of the tool call running now (the paywall gives back
# what paid for it): a list the cap makes per call, which code deeper in the call appends to.
_on_refused: ContextVar[list[OnRefused] | None] = ContextVar("on_refused", default=None)


def when_refused(action: OnRefused) -> None:
    """Run `action` if the cap refuses the current tool call's result (nothing outside a call)."""
    actions = _on_refused.get()
    if actions is not None:
        actions.append(action)


_AS_JSON = TypeAdapter(Any)
_RESULT_AS_JSON = TypeAdapter(CallToolResult)  # `dump_json` gives bytes; `model_dump_json`, a str


def result_size(result: CallToolResult | dict[str, Any]) -> int:
    """The bytes of the JSON a tool result is sent as (the SDK sends a model's non-None fields by
    alias, a dict as it is)."""
    if isinstance(result, CallToolResult):
        return len(_RESULT_AS_JSON.dump_json(result, by_alias=True, exclude_none=True))
    return len(_AS_JSON.dump_json(result))


def text_bytes(result: CallToolResult | dict[str, Any]) -> int:
    """The UTF-8 bytes of a result's text content items, without serializing anything: a lower
    bound of `result_size`, so a result whose text alone is over the cap is refused without
    copying it into JSON first."""
    content: object = result.content if isinstance(result, CallToolResult) else result.get("content")
    if not isinstance(content, list):
        return 0
    size = 0
    for item in content:
        text = (
            item.text
            if isinstance(item, TextContent)
            else item.get("text")
            if isinstance(item, dict)
            else None
        )
        if isinstance(text, str):
            size += len(text) if text.isascii() else len(text.encode(errors="replace"))
    return size


class ToolOutputCap:
    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        actions: list[OnRefused] = []
        token = _on_refused.set(actions)
        try:
            result = await call_next(ctx)
        finally:
            _on_refused.reset(token)
        # A payment prompt (`InputRequiredResult`, or its dict form) is ours, not a tool's output.
        if not isinstance(result, CallToolResult | dict) or (
            isinstance(result, dict) and result.get("resultType") == "input_required"
        ):
            return result
        text = text_bytes(result)
        if text > self._max_bytes:
            return await self._refusal(ctx, f"over {text} bytes", text, actions)
        size = result_size(result)
        if size > self._max_bytes:
            return await self._refusal(ctx, f"{size} bytes", size, actions)
        return result

    async def _refusal(
        self, ctx: ServerRequestContext[Any, Any], size_text: str, size: int, actions: list[OnRefused]
    ) -> CallToolResult:
        name = ctx.params.get("name") if ctx.params else None
        logger.warning("tool %r returned %s, over the %d-byte cap", name, size_text, self._max_bytes)
        for action in actions:
            await action()
        return CallToolResult(
            content=[
                TextContent(
                    type="text",
                    text=(
                        f"The tool's output ({size_text}) is over this service's limit of "
                        f"{self._max_bytes} bytes; ask for less (for example a shorter input)."
                    ),
                )
            ],
            is_error=True,
        )
