"""`ResponseLimit` against a real HTTP server on loopback: each response body is read up to the
limit and no further, whatever its framing, and the call's scope is cancelled when one is refused."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator

import httpx2
import pytest
from starlette.types import Receive, Scope, Send

from service.gateway.response_limit import ResponseLimit, ResponseRefused
from tests.support.servers import bound_socket, serve

LIMIT = 64 * 1024
CHUNK = 16 * 1024
ENDLESS_CAP = 64 * 1024 * 1024  # the "endless" body ends here, so a broken limit fails, not hangs


async def answers(scope: Scope, receive: Receive, send: Send) -> None:
    """`/endless`: chunked bytes until the client goes; `/sized/N`: N bytes with a Content-Length;
    `/gzip`: a small gzip body; `/encoding`: the Accept-Encoding the request carried."""
    if scope["type"] != "http":
        return
    path: str = scope["path"]
    headers: list[tuple[bytes, bytes]] = [(b"content-type", b"application/octet-stream")]
    if path == "/endless":
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for _ in range(ENDLESS_CAP // CHUNK):
            await send({"type": "http.response.body", "body": b"j" * CHUNK, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path.startswith("/sized/"):
        body = b"s" * int(path.removeprefix("/sized/"))
    elif path == "/gzip":
        body = gzip.compress(b"z" * 1000)
        headers.append((b"content-encoding", b"gzip"))
    else:
        body = dict(scope["headers"]).get(b"accept-encoding", b"(none)")
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    async with serve(answers, bound_socket(), lifespan="off") as url:
        yield url


@pytest.fixture
async def pool() -> AsyncIterator[httpx2.AsyncHTTPTransport]:
    transport = httpx2.AsyncHTTPTransport()
    yield transport
    await transport.aclose()


async def test_bodies_under_the_limit_are_read_whole_each_on_its_own(
    base_url: str, pool: httpx2.AsyncHTTPTransport
) -> None:
    limit = ResponseLimit(pool, LIMIT)
    client = httpx2.AsyncClient(transport=limit)
    with limit.abort:
        first = await client.get(f"{base_url}/sized/{LIMIT}")
        second = await client.get(f"{base_url}/sized/{LIMIT}")
        encoding = await client.get(f"{base_url}/encoding")
    assert len(first.content) == len(second.content) == LIMIT
    assert encoding.content == b"identity", "asked uncompressed: the count is of what is decoded"
    assert limit.refused is None and not limit.abort.cancel_called


async def test_an_endless_body_is_read_up_to_the_limit_and_cancels_the_call(
    base_url: str, pool: httpx2.AsyncHTTPTransport
) -> None:
    limit = ResponseLimit(pool, LIMIT)
    client = httpx2.AsyncClient(transport=limit)
    received = 0
    with limit.abort:
        async with client.stream("GET", f"{base_url}/endless") as response:
            async for chunk in response.aiter_raw():
                received += len(chunk)
    assert limit.abort.cancelled_caught
    assert received <= LIMIT
    assert limit.refused is not None and limit.refused.startswith(f"over {LIMIT} bytes, this service's limit")
    next_call = ResponseLimit(pool, LIMIT)
    with next_call.abort:
        again = await httpx2.AsyncClient(transport=next_call).get(f"{base_url}/sized/10")
    assert again.content == b"s" * 10, "the shared pool still serves the next call"


async def test_a_declared_length_over_the_limit_is_refused_unread(
    base_url: str, pool: httpx2.AsyncHTTPTransport
) -> None:
    limit = ResponseLimit(pool, LIMIT)
    client = httpx2.AsyncClient(transport=limit)
    with limit.abort:
        async with client.stream("GET", f"{base_url}/sized/{LIMIT + 1}") as response:
            await response.aread()
    assert limit.abort.cancelled_caught
    assert limit.refused is not None and limit.refused.startswith(f"over {LIMIT} bytes")


async def test_a_compressed_body_is_refused_unread(base_url: str, pool: httpx2.AsyncHTTPTransport) -> None:
    """A few kilobytes of gzip can inflate past any limit after the bytes were counted."""
    limit = ResponseLimit(pool, LIMIT)
    with limit.abort:
        await httpx2.AsyncClient(transport=limit).get(f"{base_url}/gzip")
    assert limit.refused is not None and limit.refused.startswith("compressed (gzip)")


async def test_a_reader_outside_the_calls_scope_gets_an_error(
    base_url: str, pool: httpx2.AsyncHTTPTransport
) -> None:
    limit = ResponseLimit(pool, LIMIT)
    with pytest.raises(ResponseRefused, match=f"over {LIMIT} bytes"):
        await httpx2.AsyncClient(transport=limit).get(f"{base_url}/endless")
    assert limit.refused is not None
