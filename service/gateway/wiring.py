"""Gateway mode in the lifespan: the upstream's tools are read before the paywall is built, and
handed to the MCP server's constructor after it."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import httpx2
import mcp_types as t
from mcp.server import MCPServer
from mcp.server.mcpserver.tools import Tool
from pydantic import SecretStr

from service.billing.plans import PlanCatalog
from service.gateway.tools import check_names, classify, upstream_tools_as_ours
from service.gateway.upstream import UpstreamClient, UpstreamConfig
from service.mcp_server.caller import CallerSource
from service.paywall.toolset import PaidTool, PaywallGate
from service.settings import GatewaySettings

logger = logging.getLogger("service.gateway")


@dataclass
class Gateway:
    """The upstream's classified tools, read once at start-up; empty when no upstream is configured."""

    upstream: UpstreamClient | None = None
    tools: list[t.Tool] = field(default_factory=list)
    paid_tools: dict[str, PaidTool] = field(default_factory=dict)
    free_tools: frozenset[str] = frozenset()

    async def check_names(self, ours: MCPServer) -> None:
        """Raise `ToolNameCollision` when an upstream tool has the name of a tool on `ours`."""
        check_names({tool.name for tool in await ours.list_tools()}, self.tools)

    def registry_entries(self, gate: PaywallGate, callers: CallerSource) -> list[Tool]:
        """The upstream's tools for `MCPServer(tools=...)`, paid ones behind `gate`; [] without one."""
        if self.upstream is None:
            return []
        return upstream_tools_as_ours(self.upstream, self.tools, self.paid_tools, gate, callers)


async def start_gateway(settings: GatewaySettings, stack: AsyncExitStack, catalog: PlanCatalog) -> Gateway:
    """Connect to `UPSTREAM_MCP_URL` and read its tools, or raise `UpstreamUnavailable`.

    Start-up fails rather than serving an empty or partial catalog: a paywall that silently lost
    its upstream would list no tools and look healthy. Restart (or let the orchestrator restart)
    once the upstream is up; after start-up, an unreachable upstream only fails the calls it
    receives, and the tool list stays as read here until the next start.
    """
    if not settings.url:
        return Gateway()
    config = UpstreamConfig(
        url=settings.url,
        authorization=_secret(settings.authorization),
        user_header_secret=_secret(settings.user_header_secret),
        timeout_seconds=settings.timeout_seconds,
        max_response_bytes=settings.max_response_bytes,
    )
    upstream = UpstreamClient(config, httpx2.AsyncHTTPTransport())
    stack.push_async_callback(upstream.aclose)
    classified = classify(await upstream.list_tools(), catalog, settings.free_tools)
    if classified.unclassified:
        logger.warning(
            "gateway: not serving upstream tools %s: list each in UPSTREAM_FREE_TOOLS or in a plan's tools",
            classified.unclassified,
        )
    logger.info(
        "gateway: %d upstream tools from %s (%d paid, %d free, protocol %s)",
        len(classified.served),
        config.url,
        len(classified.paid),
        len(classified.free),
        upstream.protocol_version,
    )
    return Gateway(upstream, classified.served, classified.paid, classified.free)


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None
