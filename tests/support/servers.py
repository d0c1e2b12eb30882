"""Real servers for tests: uvicorn on a loopback socket picked by the kernel, in the test's event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from starlette.types import ASGIApp

STARTUP_TIMEOUT_SECONDS = 20.0


def bound_socket() -> socket.socket:
    """A listening-ready socket on 127.0.0.1; its port is known before the app is built."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def port_of(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


@asynccontextmanager
async def serve(app: ASGIApp, sock: socket.socket) -> AsyncIterator[str]:
    """Serve `app` on `sock` until the block exits; yields the base URL once startup completed."""
    config = uvicorn.Config(app, lifespan="on", log_level="warning", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STARTUP_TIMEOUT_SECONDS
    while not server.started:
        if task.done():
            task.result()  # re-raise the startup failure
            raise RuntimeError("server exited during startup")
        if loop.time() > deadline:
            raise TimeoutError("server did not start")
        await asyncio.sleep(0.01)  # polling a flag, bounded by the deadline
    try:
        yield f"http://127.0.0.1:{port_of(sock)}"
    finally:
        server.should_exit = True
        await task
