"""Checks a POSTed JSON-RPC message's shape before the SDK reads it: nesting depth, numbers and `id`.

The SDK parses an object with an unusable `id` (an object, a float, `null` on a request) as a
notification, answers 202 and drops it; the caller never learns why. Here such a message gets
JSON-RPC's -32600 Invalid Request with HTTP 400, and JSON nested deeper than the limit, or holding
`NaN`, `Infinity`, `-Infinity` or a number past a float's range (which the SDK's parser reads), a
-32700 Parse error. A body Python's parser cannot read goes on to the SDK's parser, which is
stricter (it refuses a BOM, UTF-16, lone surrogates) and answers its own -32700: so every body the
SDK reads was checked here.
It reads the whole body, so it must sit behind `service.web.body_limit.BodyLimit`.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.json_bounds import JsonNotFinite, JsonTooDeep, loads_bounded

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


def id_problem(message: Any) -> str | None:
    """Why a single JSON-RPC message's `id` is unusable, or None (batches are left to the SDK)."""
    if not isinstance(message, dict) or "id" not in message:
        return None
    value = message["id"]
    if value is None:
        return "a request's id must not be null" if "method" in message else None
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return None
    return "id must be a string or an integer"


class JsonRpcGuard:
    def __init__(self, app: ASGIApp, *, max_depth: int) -> None:
        self.app = app
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        problem: tuple[int, str] | None = None
        try:
            reason = id_problem(loads_bounded(body, self.max_depth))
        except (JsonTooDeep, JsonNotFinite) as exc:
            problem = (PARSE_ERROR, f"Parse error: {exc}")
        except ValueError:
            reason = None  # not JSON at all: the SDK answers its own parse error
        else:
            problem = (INVALID_REQUEST, f"Invalid Request: {reason}") if reason else None
        if problem is not None:
            await _error(send, *problem)
            return
        pending = list(reversed(messages))

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)


async def _error(send: Send, code: int, text: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": text}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
