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

    def cut(self) -> None:
        """Stops accepting connections and closes every open one, as a dead server would."""
        self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    writer.close()


@asynccontextmanager
async def tcp_proxy(target_host: str, target_port: int) -> AsyncIterator[TcpProxy]:
    tasks: set[asyncio.Task[None]] = set()
    proxy: TcpProxy

    async def accept(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
        proxy._writers.update((client_writer, server_writer))
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
