"""An MCP server middleware that answers `prompts/get` of a prompt the server does not have as the
caller's mistake.

The SDK's `MCPServer.get_prompt` raises a bare `ValueError` for an unknown name, which its
dispatcher answers as -32603 "Internal server error" with a traceback logged at ERROR: any caller
could fill the error log, and learns nothing. Here the name is looked up in the server's own list
(`MCPServer.list_prompts`) first, and an unknown one is refused with -32602 Invalid params naming
it, as the SDK answers a resource that does not exist. A known prompt goes on to the SDK as before.
"""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

MAX_NAME_SHOWN = 100  # characters of the unknown name repeated in the error


class UnknownPrompts:
    def __init__(self, server: MCPServer) -> None:
        self._server = server

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        # A notification named prompts/get (no id) is not asked anything: the SDK drops it.
        if ctx.method == "prompts/get" and ctx.request_id is not None and ctx.params:
            name = ctx.params.get("name")
            # Any other shape is the SDK's params validation's to refuse.
            if isinstance(name, str) and name not in {
                prompt.name for prompt in await self._server.list_prompts()
            }:
                raise MCPError(code=INVALID_PARAMS, message=f"Unknown prompt: {name[:MAX_NAME_SHOWN]!r}")
        return await call_next(ctx)

    async def _names(self) -> set[str]:
        return {prompt.name for prompt in await self._server.list_prompts()}
