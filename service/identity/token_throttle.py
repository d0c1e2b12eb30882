"""The failed-sign-in throttle on the OAuth token endpoint: pure ASGI middleware in front of `/token`.

A token request the handler refuses (400 or 401: a wrong code, refresh token or client secret) counts
as a failure against the client IP and leaves an audit row; a locked-out IP is answered 429 with
`Retry-After` before the handler reads the request. Each request holds a place on its address while
it is handled, so concurrent requests cannot outnumber the failures the address has left: one beyond
is answered 429 without being handled or audited.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.audit.service import AuditKind, record
from service.runtime import Runtime

TOKEN_PATH = "/token"  # noqa: S105 - a path
_REFUSED_STATUSES = frozenset({400, 401})


class TokenRequestThrottle:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        runtime: Runtime | None = getattr(scope["app"].state, "runtime", None) if "app" in scope else None
        if scope["type"] != "http" or scope["path"] != TOKEN_PATH or runtime is None:
            await self.app(scope, receive, send)
            return
        client_ip = runtime.client_addresses.of(scope)
        attempt = runtime.sign_in_throttle.reserve(account=None, client_ip=client_ip)
        if isinstance(attempt, int):
            response = JSONResponse(
                {"error": "invalid_request", "error_description": "too many failed token requests"},
                status_code=429,
                headers={"Retry-After": str(attempt), "Cache-Control": "no-store"},
            )
            await response(scope, receive, send)
            return
        refused_with = 0

        async def observed(message: Message) -> None:
            # The failure is counted and audited before the response ends, so a client that has
            # read the answer cannot race the throttle with its next guess.
            nonlocal refused_with
            if message["type"] == "http.response.start":
                if message["status"] in _REFUSED_STATUSES:
                    refused_with = message["status"]
                    attempt.failed()
                else:
                    attempt.release()
            elif refused_with and message["type"] == "http.response.body" and not message.get("more_body"):
                async with runtime.sessions() as session, session.begin():
                    await record(
                        session, AuditKind.TOKEN_REQUEST_REFUSED, client_ip=client_ip, status=refused_with
                    )
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            attempt.release()  # a request that ended without a response decided nothing
