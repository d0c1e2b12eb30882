"""A loopback TCP proxy in the test's event loop: a real server behind it, and a switch to cut it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass
class TcpProxy:
    port: int
    _server: asyncio.Server
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)
    _cut: bool = False

    def cut(self) -> None:
        """Stops accepting connections and closes every open one, as a dead server would."""
        self._cut = True
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    def _hold(self, writer: asyncio.StreamWriter) -> bool:
        """Tracks `writer` so that `cut` closes it; after a cut, closes it at once instead."""
        if self._cut:
            writer.transport.abort()
            return False
        self._writers.add(writer)
        return True


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
    finally:
        writer.close()  # also when cancelled: no connection is left to the garbage collector


@asynccontextmanager
async def tcp_proxy(target_host: str, target_port: int) -> AsyncIterator[TcpProxy]:
    tasks: set[asyncio.Task[None]] = set()
    proxy: TcpProxy

    async def accept(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if not proxy._hold(client_writer):
            return
        try:
            server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:  # the target is down: the client sees its connection closed, as it would
            client_writer.transport.abort()
            return
        if not proxy._hold(server_writer):  # cut while connecting
            client_writer.transport.abort()
            return
        for task in (_pipe(client_reader, server_writer), _pipe(server_reader, client_writer)):
            running = asyncio.create_task(task)
            tasks.add(running)
            running.add_done_callback(tasks.discard)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    proxy = TcpProxy(port=server.sockets[0].getsockname()[1], _server=server)
    try:
        yield proxy
    finally:
        proxy.cut()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
