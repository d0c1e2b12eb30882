"""Refuses `POST /login` before any parsing while password hashing is saturated.

Beyond the hashing queue a sign-in is refused anyway; answering here, ahead of routing, form
parsing, the session and the page template, keeps what a flood of sign-ins costs per request
small. The refusal is held for its Retry-After before it is sent: a held request costs the event
loop nothing, and a client that retries as soon as it is answered (a flood's workers) is slowed to
one attempt per connection per second, so the replica's other requests still get the event loop.
"""

from __future__ import annotations

import asyncio

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from service.identity.passwords import BUSY_RETRY_AFTER_SECONDS
from service.runtime import Runtime

LOGIN_PATH = "/login"


class BusySignInGate:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == LOGIN_PATH and scope["method"] == "POST":
            runtime: Runtime | None = getattr(scope["app"].state, "runtime", None)
            if runtime is not None and runtime.passwords.saturated:
                await asyncio.sleep(BUSY_RETRY_AFTER_SECONDS)  # the tarpit: see the module's docstring
                response = PlainTextResponse(
                    "Sign-in is busy. Wait a moment, then try again.",
                    status_code=503,
                    headers={"Retry-After": str(BUSY_RETRY_AFTER_SECONDS), "Cache-Control": "no-store"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
