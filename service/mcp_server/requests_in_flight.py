"""A per-user cap on `/mcp` requests in flight at once, on this replica.

2026-07-28 requests open no session, so the legacy session cap does not bound them: without this,
one token could keep any number of tool calls running (each a task, a worker thread for a sync tool,
a connection upstream in gateway mode) and crowd out every other user. A POST beyond the caller's
cap is answered at once with 429, a `Retry-After` and a JSON-RPC error, before its body is read;
other users are not affected. GET (a session's event stream, bounded by the session cap) and DELETE
are not counted.

A request counts from its POST until both the POST and the SDK's handling of its message have
ended. In a 2025-11-25 session the SDK handles a message in the session's own task, which goes on
when the client hangs up the POST: counting only the POST would let one user run any number of
hung-up calls. So the POST leaves its `Place` in the ASGI scope, and `HandlingInFlight`, the MCP
server's outermost middleware, holds it while the handling runs (in 2026-07-28 the handling runs
within the POST, so it is counted once).
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from service.mcp_server.refusal import refusal

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 1

_PLACE_KEY = "service.mcp_request_place"  # where a POST's `Place` travels in the ASGI scope


class RequestsInFlight:
    """Counts each user's requests under way, at most `max_per_user` each."""

    def __init__(self, *, max_per_user: int) -> None:
        self.max_per_user = max_per_user
        self._counts: dict[str, int] = {}

    def count(self, user: str) -> int:
        return self._counts.get(user, 0)

    def enter(self, user: str) -> bool:
        """Take one of `user`'s places; False (and nothing taken) when all are taken."""
        held = self._counts.get(user, 0)
        if held >= self.max_per_user:
            return False
        self._counts[user] = held + 1
        return True

    def take(self, user: str) -> None:
        """Take one of `user`'s places even past the cap, for a request admitted already."""
        self._counts[user] = self._counts.get(user, 0) + 1

    def leave(self, user: str) -> None:
        left = self._counts.get(user, 0) - 1
        if left > 0:
            self._counts[user] = left
        else:
            self._counts.pop(user, None)


class Place:
    """One admitted request's place among its user's requests in flight, shared by its POST and
    every handling of its message: given back when the last of them ends."""

    def __init__(self, in_flight: RequestsInFlight, user: str) -> None:
        self._in_flight = in_flight
        self._user = user
        self._holders = 1  # the POST, which took the place

    def hold(self) -> None:
        if self._holders == 0:
            # The POST ended before the SDK began handling its message: counted again, cap or not.
            self._in_flight.take(self._user)
        self._holders += 1

    def release(self) -> None:
        self._holders -= 1
        if self._holders == 0:
            self._in_flight.leave(self._user)


class UserRequestLimit:
    """ASGI layer in front of the SDK's `/mcp` endpoint, behind authentication: refuses a POST
    beyond the caller's requests in flight with 429."""

    def __init__(self, app: ASGIApp, in_flight: RequestsInFlight) -> None:
        self.app = app
        self._in_flight = in_flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user") if scope["type"] == "http" and scope["method"] == "POST" else None
        if not isinstance(user, AuthenticatedUser):
            await self.app(scope, receive, send)
            return
        token = user.access_token
        caller = token.subject or f"client:{token.client_id}"
        if not self._in_flight.enter(caller):
            logger.info("refused an MCP request: the caller has %d in flight", self._in_flight.max_per_user)
            await _too_many_requests(self._in_flight.max_per_user)(scope, receive, send)
            return
        place = Place(self._in_flight, caller)
        scope[_PLACE_KEY] = place  # for `HandlingInFlight`, through the SDK's `Request` of this POST
        try:
            await self.app(scope, receive, send)
        finally:
            place.release()


class HandlingInFlight:
    """MCP server middleware, outermost: keeps a request's place taken while the SDK handles its
    message, which in a 2025-11-25 session goes on after the client hangs up the POST."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        place = ctx.request.scope.get(_PLACE_KEY) if isinstance(ctx.request, Request) else None
        if not isinstance(place, Place):
            return await call_next(ctx)
        place.hold()
        try:
            return await call_next(ctx)
        finally:
            place.release()


def _too_many_requests(cap: int) -> Response:
    message = (
        f"Too many MCP requests in flight for this account: at most {cap} at a time. Wait for one "
        "to finish, then retry."
    )
    return refusal(message, status_code=429, retry_after=RETRY_AFTER_SECONDS)
