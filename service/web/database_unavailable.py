"""Pure ASGI middleware: a database that cannot be reached becomes a 503 with Retry-After, not a 500.

Clients treat 401 as "get a new token" and 500 as "bug"; 503 tells them to come back, which is
the truth when the database is down.
"""

from __future__ import annotations

import logging

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = "5"
UNAVAILABLE_BODY = {"error": "service_unavailable", "error_description": "database unavailable"}


def unavailable_answer(exc: BaseException) -> Response | None:
    """The 503 for an error that means the database cannot be reached; None for any other error."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return None
    logger.warning("database unavailable: %s", type(getattr(exc, "orig", exc)).__name__)
    return JSONResponse(UNAVAILABLE_BODY, status_code=503, headers={"Retry-After": RETRY_AFTER_SECONDS})


async def database_unavailable(request: Request, exc: Exception) -> Response:
    """The FastAPI exception handler twin of the middleware, for the service's own routes."""
    answer = unavailable_answer(exc)
    if answer is None:
        raise exc
    return answer


class DatabaseUnavailableMiddleware:
    """For apps whose routes have no exception handlers of ours (the SDK's OAuth endpoints).

    `/mcp` does not need it: it is a route of the service's app, whose handlers answer the bearer
    check's database failure (the only database work outside the SDK's own error handling)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except DBAPIError as exc:
            answer = None if started else unavailable_answer(exc)
            if answer is None:
                raise
            await answer(scope, receive, send)
