"""Hooks the metrics into one runtime's MCP server, and starts the separate metrics listener."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack

from mcp.server import MCPServer

from service.observability.exposition import serve_metrics
from service.observability.mcp_middleware import ToolCallObserver
from service.observability.metrics import ServiceMetrics
from service.settings import Settings

logger = logging.getLogger("service.metrics")


async def install_observability(
    settings: Settings, mcp: MCPServer, metrics: ServiceMetrics, stack: AsyncExitStack
) -> None:
    """Call after the tools are installed: tool names are fixed from here on."""
    tools = frozenset(tool.name for tool in await mcp.list_tools())
    metrics.declare_tools(tools)
    mcp.middleware.append(ToolCallObserver(metrics, tools.__contains__))
    if settings.metrics_served and settings.metrics_port:
        port = await stack.enter_async_context(
            serve_metrics(metrics.registry, settings.host, settings.metrics_port)
        )
        logger.info("metrics served on %s:%d/metrics", settings.host, port)
