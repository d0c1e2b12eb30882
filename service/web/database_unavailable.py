"""Pure ASGI middleware: a database that cannot be reached becomes a 503 with Retry-After, not a 500.

Clients treat 401 as "get a new token" and 500 as "bug"; 503 tells them to come back, which is
the truth when the database is down.
"""

from __future__ import annotations

import json
import logging

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = "5"
UNAVAILABLE_BODY = {"error": "service_unavailable", "error_description": "database unavailable"}


async def database_unavailable(request: Request, exc: Exception) -> Response:
    """The FastAPI exception handler twin of the middleware, for the service's own routes."""
    logger.warning("database unavailable: %s", type(getattr(exc, "orig", exc)).__name__)
    return JSONResponse(UNAVAILABLE_BODY, status_code=503, headers={"Retry-After": RETRY_AFTER_SECONDS})


class DatabaseUnavailableMiddleware:
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
            if started or not isinstance(exc, OperationalError | InterfaceError):
                raise
            logger.warning("database unavailable: %s", type(exc.orig).__name__)
            body = json.dumps(UNAVAILABLE_BODY)
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"retry-after", RETRY_AFTER_SECONDS.encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body.encode()})
