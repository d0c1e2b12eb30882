"""Serving in the background: sockets with TCP_NODELAY, and a server that leaves the process alone."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
import warnings

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from service.web.background_server import bind_loopback, port_of, serve_in_background
from tests.support.servers import ReservedPort


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


async def test_a_server_in_the_background_leaves_signals_and_logging_to_the_host_process() -> None:
    """Ctrl+C and SIGTERM stay with whoever runs the process, and uvicorn's loggers as they were."""

    async def hello(_: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    uvicorn_loggers = {
        name: (logger.level, list(logger.handlers), logger.propagate)
        for name in ("uvicorn", "uvicorn.error")
        if (logger := logging.getLogger(name))
    }
    sock = bind_loopback()
    async with serve_in_background(Starlette(routes=[Route("/", hello)]), sock) as base_url:
        assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
        async with httpx.AsyncClient(base_url=base_url) as http:
            response = await http.get("/")
        assert response.text == "hello" and response.headers["date"]
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    for name, before in uvicorn_loggers.items():
        logger = logging.getLogger(name)
        assert (logger.level, list(logger.handlers), logger.propagate) == before, name


def test_a_port_already_served_is_refused_without_leaking_the_socket() -> None:
    with bind_loopback() as taken:
        taken.listen()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(OSError, match="in use"):
                bind_loopback(port_of(taken))
            gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], caught


async def test_a_reserved_port_refuses_connections_between_servers_and_serves_each_one() -> None:
    """What a restarted replica or upstream relies on: its port stays its own while it is down."""

    async def hello(_: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    app = Starlette(routes=[Route("/", hello)])
    with ReservedPort() as reserved:
        base_url = f"http://127.0.0.1:{reserved.port}"
        async with httpx.AsyncClient(base_url=base_url) as http:
            for _ in range(2):
                with pytest.raises(httpx.ConnectError):
                    await http.get("/")
                async with serve_in_background(app, reserved.listener(), lifespan="off"):
                    assert (await http.get("/")).text == "hello"
        with bind_loopback() as other:
            assert port_of(other) != reserved.port
