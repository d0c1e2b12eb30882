"""A bound on how much of the upstream's answers one forwarded call reads.

The SDK's client reads a JSON answer whole (`response.aread()`) and an SSE answer for as long as
it goes on, so an upstream could fill this service's memory, or keep one call reading until its
timeout. `ResponseLimit` is an httpx transport for one call over the shared connection pool: it
counts each response body's bytes as they arrive and stops the body past `max_bytes`, then
cancels the call (`abort`), so the call ends at once with a tool error rather than whatever the
SDK makes of a broken stream. Each response counts on its own: a `tools/call` POST's answer, the
GET stream a 2025-11-25 session opens, a reconnection.

The body is counted as sent, so the request asks for it uncompressed (`Accept-Encoding:
identity`) and a compressed answer is refused unread: a few kilobytes of gzip can inflate to
gigabytes after the count.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import NoReturn

import anyio
import anyio.lowlevel
import httpx2


class ResponseRefused(httpx2.StreamError):
    """A response body this call will not read (further); the message says why."""


class ResponseLimit(httpx2.AsyncBaseTransport):
    """One call's view of the shared upstream transport; see the module docstring."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, max_bytes: int) -> None:
        self._inner = inner
        self.max_bytes = max_bytes
        self.abort = anyio.CancelScope()
        """Enter it around the call: it is cancelled when a response is refused."""
        self.refused: str | None = None
        """Why the first refused response was, to follow "the answer was": None while none was."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        stream = response.stream
        if not isinstance(stream, httpx2.AsyncByteStream):  # an async transport's always is
            raise TypeError(f"{type(self._inner).__name__} returned a sync stream")
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_CountedStream(stream, self, _refusal_before_reading(response, self.max_bytes)),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Nothing: the pool belongs to the shared transport, closed with the app."""

    async def refuse(self, why: str) -> NoReturn:
        """Cancel the call, so the SDK never handles a broken answer (and never logs it as one);
        the error is for a reader outside `abort`, which the cancellation does not reach."""
        if self.refused is None:
            self.refused = why
        self.abort.cancel()
        await anyio.lowlevel.checkpoint()
        raise ResponseRefused(f"the upstream's answer was {why}")


def _refusal_before_reading(response: httpx2.Response, max_bytes: int) -> str | None:
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("identity", ""):
        return f"compressed ({encoding}), which this service does not accept, and was dropped"
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        return _over(max_bytes)
    return None


def _over(max_bytes: int) -> str:
    return (
        f"over {max_bytes} bytes, this service's limit, and was dropped; "
        "ask for less (for example a shorter input)"
    )


class _CountedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: ResponseLimit, refusal: str | None) -> None:
        self._inner = inner
        self._limit = limit
        self._refusal = refusal

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._refusal is not None:
            await self._limit.refuse(self._refusal)
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit.max_bytes:
                await self._limit.refuse(_over(self._limit.max_bytes))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
