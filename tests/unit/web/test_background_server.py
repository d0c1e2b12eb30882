"""Sockets we bind ourselves must give accepted connections TCP_NODELAY, as uvicorn's own do."""

from __future__ import annotations

import asyncio
import socket

from service.web.background_server import bind_loopback


async def test_connections_accepted_on_a_socket_we_bound_do_not_wait_for_acks() -> None:
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    listener = bind_loopback()
    server = await asyncio.start_server(on_connect, sock=listener)
    async with server:
        _, writer = await asyncio.open_connection(*listener.getsockname())
        nodelay = await asyncio.wait_for(accepted, 5)
        writer.close()
    assert nodelay == 1, "Nagle's algorithm is on: every two-part response waits for a delayed ACK"
