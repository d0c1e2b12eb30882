"""Serving `/metrics`: on the main app (METRICS_PORT=0) or on a listener of its own.

Where it is served, and whether at all, is `Settings.observability.metrics_enabled` / `metrics_port`: in
development it is on the main port; in production it is off unless METRICS_PORT names a separate
port (kept out of the Service and Ingress, scraped on the pod IP) or METRICS_ENABLED=true asks for
it on the main port, which then has to be blocked at the ingress.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.dependencies import MetricsDep
from service.web.background_server import serve_in_background

router = APIRouter(tags=["metrics"])


def metrics_response(registry: CollectorRegistry) -> Response:
    return Response(
        generate_latest(registry), media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"}
    )


@router.get("/metrics", include_in_schema=False)
async def metrics_on_main_port(metrics: MetricsDep) -> Response:
    return metrics_response(metrics.registry)


def metrics_app(registry: CollectorRegistry) -> Starlette:
    async def metrics(_: Request) -> Response:
        return metrics_response(registry)

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # see bind_loopback: no Nagle
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


@asynccontextmanager
async def serve_metrics(
    registry: CollectorRegistry, host: str, port: int, listener: socket.socket | None = None
) -> AsyncIterator[int]:
    """Serve `/metrics` on `listener`, already bound (`serve --metrics-fd`), or else on host:port,
    until the block exits; yields the bound port. A listener handed in is closed on exit too."""
    sock = listener if listener is not None else _bind(host, port)
    try:
        async with serve_in_background(metrics_app(registry), sock, lifespan="off"):
            yield int(sock.getsockname()[1])
    finally:
        sock.close()
