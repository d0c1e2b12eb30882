"""Graceful shutdown that lets in-flight calls finish, including 2025-11-25 calls answered over SSE.

On SIGTERM uvicorn stops accepting connections and waits for open ones to finish. sse-starlette,
which the MCP SDK answers SSE requests with, would by default end every SSE response as soon as
the signal arrives, cutting in-flight legacy tool calls; its automatic drain is turned off here
(its public `AppStatus` switch). Requests that do work run to completion; a 2025-11-25 session's
standalone `GET /mcp` stream, idle by nature, is ended cleanly once no such request is left, so
the process can exit. uvicorn's `timeout_graceful_shutdown` still bounds the whole drain.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from types import FrameType

import anyio
import uvicorn
from sse_starlette.sse import AppStatus
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

IDLE_STREAM_PATH = "/mcp"


class Draining:
    """Pure ASGI wrapper: counts requests doing work, and ends idle streams once drained."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._drained = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
        elif scope["method"] == "GET" and scope["path"] == IDLE_STREAM_PATH:
            await self._stream_until_drained(scope, receive, send)
        else:
            self.in_flight += 1
            self._idle.clear()
            try:
                await self.app(scope, receive, send)
            finally:
                self.in_flight -= 1
                if self.in_flight == 0:
                    self._idle.set()

    async def _stream_until_drained(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = finished = False

        async def tracking_send(message: Message) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True
            await send(message)

        async with anyio.create_task_group() as group:

            async def end_when_drained() -> None:
                await self._drained.wait()
                group.cancel_scope.cancel()

            group.start_soon(end_when_drained)
            await self.app(scope, receive, tracking_send)
            group.cancel_scope.cancel()
        if started and not finished:  # a clean end of the chunked response, not a cut connection
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def drain(self) -> None:
        """Waits until no request is doing work, then ends the idle streams."""
        if self.in_flight:
            logger.info("shutting down: %d request(s) in flight may finish first", self.in_flight)
        await self._idle.wait()
        logger.info("shutting down: no request in flight; ending idle session streams")
        self._drained.set()


class DrainingServer(uvicorn.Server):
    """uvicorn's server, which on a shutdown signal also starts `Draining.drain`.

    `after_shutdown` runs once the app has shut down, before uvicorn re-raises the signal that
    stopped it (which ends the process without running anything after `run`).
    """

    def __init__(
        self, config: uvicorn.Config, draining: Draining, after_shutdown: Callable[[], object] | None = None
    ) -> None:
        super().__init__(config)
        self._draining = draining
        self._after_shutdown = after_shutdown
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Task[None] | None = None
        AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        if self._after_shutdown is not None:
            self._after_shutdown()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_task(self._draining.drain())
