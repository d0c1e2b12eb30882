"""Gives the SDK's bodiless `/mcp` refusals a JSON-RPC error that says what was wrong.

On its 2026-07-28 path (and for any `MCP-Protocol-Version` it does not know) the SDK answers a
method other than POST with a bare 405 and an `Accept` header that does not list what it can send
with a bare 406: the caller learns a status code and nothing else, where its 2025-11-25 path
explains both. Such an answer gets the same JSON-RPC error body the 2025-11-25 path sends
(-32600, `id` null) saying what to send instead; an answer that has a body passes untouched.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

INVALID_REQUEST = -32600


def _explanations(json_response: bool) -> dict[int, str]:
    accepted = "application/json" if json_response else "application/json and text/event-stream"
    return {
        405: "Method Not Allowed: send MCP requests to this endpoint with {allow}",
        406: f"Not Acceptable: the Accept header must list {accepted}",
    }


class ExplainedRefusals:
    def __init__(self, app: ASGIApp, *, json_response: bool) -> None:
        self.app = app
        self._explanations = _explanations(json_response)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: Message | None = None  # a refusal's start, until its body shows whether it is empty

        async def explaining(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and message["status"] in self._explanations:
                held = message
                return
            if held is not None and message["type"] == "http.response.body":
                start, held = held, None
                if not message.get("body") and not message.get("more_body", False):
                    await self._explained(start, send)
                    return
                await send(start)
            await send(message)

        await self.app(scope, receive, explaining)

    async def _explained(self, start: Message, send: Send) -> None:
        headers = [
            (name, value)
            for name, value in start.get("headers", [])
            if name.lower() not in (b"content-length", b"content-type")
        ]
        allow = next((value.decode("latin-1") for name, value in headers if name.lower() == b"allow"), "POST")
        text = self._explanations[start["status"]].format(allow=allow)
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": text}})
        encoded = body.encode()
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(encoded)).encode())]
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": encoded})
