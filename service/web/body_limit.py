"""A request-body limit for every HTTP request, as a pure ASGI middleware.

A body is refused with 413 when its declared `Content-Length` is over the limit, before any of it
is read, or, for a chunked body, as soon as the bytes read so far pass the limit: the process never
holds more than the limit of one request's body. The body read so far is handed on unchanged, so
the app behind reads it as if it came from the server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """Refuses request bodies over `limit` bytes (`per_path` overrides it for exact paths)."""

    def __init__(self, app: ASGIApp, *, limit: int, per_path: Mapping[str, int] | None = None) -> None:
        self.app = app
        self.limit = limit
        self.per_path = dict(per_path or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.per_path.get(scope["path"], self.limit) if self.per_path else self.limit
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(send, limit)
            return
        first = await receive()
        if first["type"] != "http.request" or not first.get("more_body", False):
            if len(first.get("body", b"")) > limit:
                await _too_large(send, limit)
                return
            await self.app(scope, _replaying([first], receive), send)
            return
        chunks = [first.get("body", b"")]
        size = len(chunks[0])
        message = first
        while message.get("more_body", False):
            if size > limit:
                await _too_large(send, limit)
                return
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; the app sees the disconnect after the body so far
            body = message.get("body", b"")
            chunks.append(body)
            size += len(body)
        if size > limit:
            await _too_large(send, limit)
            return
        whole: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        replay = [whole] if message["type"] == "http.request" else [whole, message]
        await self.app(scope, _replaying(replay, receive), send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """`receive` that first hands out `messages`, then defers to the server's."""
    pending = list(reversed(messages))

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay


async def _too_large(send: Send, limit: int) -> None:
    """413, and the connection closed: the rest of the body is never read."""
    body = json.dumps({"error": "request_too_large", "detail": f"the request body is over {limit} bytes"})
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})
