"""Hooks the metrics into one runtime's MCP server, and starts the separate metrics listener."""

from __future__ import annotations

import logging
import socket
from contextlib import AsyncExitStack

from mcp.server import MCPServer
from sqlalchemy.ext.asyncio import AsyncEngine

from service.billing.stripe_sync.processor import WebhookProcessor
from service.db.engine import PoolLimits, checked_out_connections
from service.observability.exposition import serve_metrics
from service.observability.mcp_middleware import ToolCallObserver
from service.observability.metrics import ServiceMetrics
from service.paywall.bus import CompletionBus
from service.paywall.pg_bus import PostgresBus
from service.settings import ObservabilitySettings

logger = logging.getLogger("service.metrics")


def watch_resources(
    metrics: ServiceMetrics,
    engine: AsyncEngine,
    pool: PoolLimits,
    bus: CompletionBus,
    webhooks: WebhookProcessor,
) -> None:
    """Gauges read at scrape time: the database pool, the completion bus, the webhook commit queue."""
    metrics.watch_db_pool(lambda: checked_out_connections(engine), pool.max_connections)
    if isinstance(bus, PostgresBus):
        metrics.watch_completion_bus(bus.listening.is_set)
    metrics.count_webhook_queue(lambda: webhooks.queued_events)


async def install_observability(
    observability: ObservabilitySettings,
    mcp: MCPServer,
    metrics: ServiceMetrics,
    stack: AsyncExitStack,
    *,
    served: bool,
    host: str,
    metrics_listener: socket.socket | None = None,
) -> None:
    """Call after the tools are installed: tool names are fixed from here on.

    `served` says whether `/metrics` is served at all; with a `METRICS_PORT`, on its own listener at `host`,
    or on `metrics_listener` when one was bound already.
    """
    tools = frozenset(tool.name for tool in await mcp.list_tools())
    metrics.declare_tools(tools)
    mcp.middleware.append(ToolCallObserver(metrics, tools.__contains__))
    if served and observability.metrics_port:
        port = await stack.enter_async_context(
            serve_metrics(metrics.registry, host, observability.metrics_port, metrics_listener)
        )
        logger.info("metrics served on %s:%d/metrics", host, port)
