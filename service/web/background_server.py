"""Serving an ASGI app from inside another app's lifespan: uvicorn on an already-bound socket."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import uvicorn
from starlette.types import ASGIApp

STARTUP_TIMEOUT_SECONDS = 20.0


def bind_loopback(port: int = 0, *, share_port: bool = False) -> socket.socket:
    """A socket bound on 127.0.0.1 (port 0: the kernel picks); its port is known before serving.

    Made with an explicit IPPROTO_TCP: asyncio disables Nagle's algorithm only on accepted sockets
    whose `proto` is TCP, and accepted sockets inherit 0 from a listener made without it. Then
    every response uvicorn writes in two pieces (head, body) waits out the peer's delayed ACK
    (docs/adr/0008-measured-choices.md). `share_port` sets SO_REUSEPORT, so that other sockets of
    this user that set it too may bind the same port (a port held across restarts).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if share_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", port))
    except BaseException:
        sock.close()  # a port already taken must not leave an unbound socket to the collector
        raise
    return sock


def port_of(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


@asynccontextmanager
async def serve_in_background(
    app: ASGIApp, sock: socket.socket, *, lifespan: Literal["on", "off"] = "on"
) -> AsyncIterator[str]:
    """Serve `app` on `sock` until the block exits; yields the base URL once startup completed.

    The host process owns signals and logging, so this runs uvicorn's public steps (`startup`,
    `main_loop`, `shutdown`) rather than `Server.serve`, which installs SIGINT and SIGTERM handlers
    of its own, and its `Config` is given no logging configuration to apply (`log_config`,
    `log_level` and `access_log=False` would each change uvicorn's loggers process-wide; `serve`
    turns uvicorn's access log off for the whole process, and the request-context middleware writes
    the access line).
    """
    config = uvicorn.Config(
        app,
        lifespan=lifespan,
        log_config=None,
        log_level=None,
        proxy_headers=False,  # the app reads X-Forwarded-For itself, from TRUSTED_PROXIES only
        timeout_graceful_shutdown=5,
    )
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT_SECONDS):
            await server.startup(sockets=[sock])
    except SystemExit as exc:  # uvicorn's answer to a failed lifespan startup
        raise RuntimeError("server exited during startup") from exc
    ticking = asyncio.create_task(server.main_loop())  # the Date header, once a second
    try:
        yield f"http://127.0.0.1:{port_of(sock)}"
    finally:
        server.should_exit = True
        await ticking
        await server.shutdown(sockets=[sock])
