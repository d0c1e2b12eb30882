"""Upstream tools served as our own: same name, description, schemas and annotations.

`MCPServer.add_tool` derives a tool's schemas from a Python signature, which an upstream tool does
not have. `MCPServer`'s constructor also takes prebuilt `mcp.server.mcpserver.tools.Tool` objects,
and the server lists and runs them (`tool.parameters`, `tool.output_schema`, `tool.run(arguments,
ctx)`), so an `UpstreamTool` subclass carries the upstream's raw JSON schemas and replaces `run`
with "paywall, then forward". Argument validation is left to the upstream, which owns the schema.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import mcp_types as t
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import func_metadata
from pydantic import Field

from service.billing.plans import PlanCatalog
from service.gateway.upstream import UpstreamClient
from service.mcp_server.caller import CallerSource
from service.paywall.toolset import PaidTool, PaywallGate

Forward = Callable[[dict[str, Any], Context], Awaitable[t.CallToolResult | t.InputRequiredResult]]


class ToolNameCollision(Exception):
    """An upstream tool has the name of one of our own tools; the message names them."""


class UpstreamTool(Tool):
    """A registry entry whose schemas come from the upstream's listing instead of a signature."""

    upstream_output_schema: dict[str, Any] | None = None
    forward: Forward = Field(exclude=True)

    @cached_property
    def output_schema(self) -> dict[str, Any] | None:
        return self.upstream_output_schema

    async def run(
        self, arguments: dict[str, Any], context: Context[Any, Any], convert_result: bool = False
    ) -> Any:
        return await self.forward(arguments, context)


def _no_parameters() -> None:
    """Stands in for the function `Tool` expects; the arguments go upstream as given."""


class UnclassifiedTools(Exception):
    """The gateway's configuration classifies an upstream tool both free and paid; the message names it."""


@dataclass(frozen=True)
class Classified:
    """The upstream tools the gateway serves, and the ones it leaves out for want of a class."""

    served: list[t.Tool]
    paid: dict[str, PaidTool]
    free: frozenset[str]
    unclassified: list[str]


def classify(upstream_tools: list[t.Tool], catalog: PlanCatalog, free: Iterable[str]) -> Classified:
    """Paid: some plan lists the tool. Free: `UPSTREAM_FREE_TOOLS` names it. Anything else is not served.

    A tool the upstream adds later is therefore never served, free or otherwise, until an operator
    decides which it is; naming a tool both ways is a start-up error.
    """
    declared_free = set(free)
    paid: dict[str, PaidTool] = {}
    for tool in upstream_tools:
        plans = tuple(plan.id for plan in catalog.plans_unlocking(tool.name))
        if plans:
            paid[tool.name] = PaidTool(_no_parameters, tool.name, tool.description, tool.title, plans)
    both = sorted(declared_free & paid.keys())
    if both:
        raise UnclassifiedTools(
            f"upstream tools {both} are listed in UPSTREAM_FREE_TOOLS and sold by a plan; choose one"
        )
    served = [tool for tool in upstream_tools if tool.name in paid or tool.name in declared_free]
    left_out = sorted(
        tool.name for tool in upstream_tools if tool.name not in paid and tool.name not in declared_free
    )
    free_served = frozenset(tool.name for tool in served if tool.name in declared_free)
    return Classified(served, paid, free_served, left_out)


def _forwarder(
    upstream: UpstreamClient, name: str, paid: PaidTool | None, gate: PaywallGate, callers: CallerSource
) -> Forward:
    async def forward(arguments: dict[str, Any], ctx: Context) -> t.CallToolResult | t.InputRequiredResult:
        async def relay(progress: float, total: float | None, message: str | None) -> None:
            # A no-op when our caller sent no progress token; otherwise on our caller's token.
            await ctx.report_progress(progress, total, message)

        async def call() -> t.CallToolResult:
            return await upstream.call_tool(callers().user_id, name, arguments, relay)

        if paid is None:
            return await call()
        answer: t.CallToolResult | t.InputRequiredResult = await gate.run(ctx, paid, arguments, call)
        return answer

    return forward


def check_names(ours: set[str], upstream_tools: list[t.Tool]) -> None:
    """Raise `ToolNameCollision` when an upstream tool has the name of one of `ours`."""
    clashes = sorted(ours & {tool.name for tool in upstream_tools})
    if clashes:
        raise ToolNameCollision(
            f"upstream MCP tools {clashes} have the names of this service's own tools; "
            "rename them upstream or drop the local tool package that defines them"
        )


def upstream_tools_as_ours(
    upstream: UpstreamClient,
    upstream_tools: list[t.Tool],
    paid: dict[str, PaidTool],
    gate: PaywallGate,
    callers: CallerSource,
) -> list[Tool]:
    """Every upstream tool as a registry entry for `MCPServer(tools=...)`."""
    metadata = func_metadata(_no_parameters, structured_output=False)
    return [
        UpstreamTool(
            fn=_no_parameters,
            name=tool.name,
            title=tool.title,
            description=tool.description or "",
            parameters=tool.input_schema,
            fn_metadata=metadata,
            is_async=True,
            annotations=tool.annotations,
            icons=tool.icons,
            meta=tool.meta,
            upstream_output_schema=tool.output_schema,
            forward=_forwarder(upstream, tool.name, paid.get(tool.name), gate, callers),
        )
        for tool in upstream_tools
    ]
