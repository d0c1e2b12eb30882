"""Per-user bookkeeping of open 2025-11-25 (legacy) MCP sessions, and the cap on them.

The SDK's session manager caps sessions for the whole process only, so one token could fill it and
lock every other user out. It offers no public hook for a session's end either, so the ledger sees
sessions at the HTTP level, as the manager does: a legacy `initialize` answered with an
`Mcp-Session-Id` opens one; a successful DELETE, a 404 for the session id from the principal that
opened it (the SDK forgot it) or the SDK's idle timeout (no request in flight for that long) ends it.

The cap counts per user, but the SDK binds a session to the principal of the credential that opened
it (client id, issuer and subject): the same user's other credential gets a 404 for a session the
SDK still holds. So only requests from the opening principal can end a session here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    AuthorizationContext,
    authorization_context,
)
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.mcp_server.refusal import refusal

logger = logging.getLogger(__name__)

_SESSION_HEADER = MCP_SESSION_ID_HEADER.encode("ascii")
_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.encode("ascii")
_LEGACY_VERSIONS = frozenset(version.encode("latin-1") for version in HANDSHAKE_PROTOCOL_VERSIONS)

SessionEnded = Callable[[str], None]


@dataclass
class _Session:
    owner: str
    principal: AuthorizationContext  # the SDK's key for the session: only it reaches the session
    in_flight: int = 0
    idle_since: float = 0.0


class LegacySessions:
    """Which user opened which legacy session, at most `max_per_user` each, until it ends.

    `on_end` listeners hear every session id that ends, however it ended.
    """

    def __init__(
        self,
        *,
        max_per_user: int,
        idle_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_per_user = max_per_user
        self._idle_timeout = idle_timeout
        self._clock = clock
        self._sessions: dict[str, _Session] = {}
        self._by_owner: dict[str, set[str]] = {}
        self._opening: dict[str, int] = {}  # owner -> initialize requests not yet answered
        self._listeners: list[SessionEnded] = []

    def on_end(self, listener: SessionEnded) -> None:
        self._listeners.append(listener)

    def total_open(self) -> int:
        """Sessions open on this replica, all users together (the `mcp_legacy_sessions_open` gauge)."""
        return len(self._sessions)

    def open_count(self, owner: str) -> int:
        self._expire(owner)
        return len(self._by_owner.get(owner, ())) + self._opening.get(owner, 0)

    def admit(self, owner: str) -> bool:
        """Reserve a place for a session `owner` is opening; False when they are at the cap."""
        if self.open_count(owner) >= self.max_per_user:
            return False
        self._opening[owner] = self._opening.get(owner, 0) + 1
        return True

    def settle(self, owner: str, session_id: str | None, principal: AuthorizationContext) -> None:
        """The opening request, from `principal`, was answered: with `session_id`, or without a
        session (None)."""
        left = self._opening.get(owner, 0) - 1
        if left > 0:
            self._opening[owner] = left
        else:
            self._opening.pop(owner, None)
        if session_id is not None and session_id not in self._sessions:
            self._sessions[session_id] = _Session(owner, principal, idle_since=self._clock())
            self._by_owner.setdefault(owner, set()).add(session_id)

    def opened_by(self, session_id: str, principal: AuthorizationContext) -> bool:
        """Whether `principal` opened the session: the only one the SDK lets use or end it."""
        session = self._sessions.get(session_id)
        return session is not None and session.principal == principal

    def requests_in_flight(self, session_id: str) -> int:
        """The session's HTTP requests under way (for probes and tests); 0 for a session not held."""
        session = self._sessions.get(session_id)
        return session.in_flight if session is not None else 0

    def request_started(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.in_flight += 1

    def request_finished(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.in_flight = max(0, session.in_flight - 1)
            session.idle_since = self._clock()

    def end(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        owned = self._by_owner.get(session.owner)
        if owned is not None:
            owned.discard(session_id)
            if not owned:
                del self._by_owner[session.owner]
        for listener in self._listeners:
            listener(session_id)

    async def expire_idle(self) -> int:
        """End every session the SDK's idle timeout has ended by now; how many."""
        return self._expire(None)

    def _expire(self, owner: str | None) -> int:
        cutoff = self._clock() - self._idle_timeout
        candidates = self._by_owner.get(owner, set()) if owner is not None else self._sessions
        idle = [
            session_id
            for session_id in list(candidates)
            if (session := self._sessions.get(session_id)) is not None
            and session.in_flight == 0
            and session.idle_since <= cutoff
        ]
        for session_id in idle:
            self.end(session_id)
        return len(idle)


def _caller(scope: Scope) -> tuple[str, AuthorizationContext] | None:
    """The user the cap counts against, and the principal the SDK binds a session to."""
    user = scope.get("user")
    if not isinstance(user, AuthenticatedUser):
        return None
    token = user.access_token
    return token.subject or f"client:{token.client_id}", authorization_context(user)


class LegacySessionLimit:
    """ASGI layer in front of the SDK's `/mcp` endpoint, behind authentication: refuses a legacy
    `initialize` beyond the caller's cap with 429, and keeps `LegacySessions` up to date."""

    def __init__(self, app: ASGIApp, sessions: LegacySessions) -> None:
        self.app = app
        self._sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = _caller(scope) if scope["type"] == "http" else None
        if caller is None:
            await self.app(scope, receive, send)
            return
        owner, principal = caller
        session_id: bytes | None = None
        version: bytes | None = None
        for name, value in scope["headers"]:
            if name == _SESSION_HEADER:
                session_id = value
            elif name == _VERSION_HEADER:
                version = value
        if version is not None and version not in _LEGACY_VERSIONS:
            await self.app(scope, receive, send)  # 2026-07-28: no sessions
            return
        if session_id is None:
            await self._opening(owner, principal, scope, receive, send)
        else:
            await self._within(principal, session_id.decode("latin-1"), scope, receive, send)

    async def _opening(
        self, owner: str, principal: AuthorizationContext, scope: Scope, receive: Receive, send: Send
    ) -> None:
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if not self._sessions.admit(owner):
            logger.info("refused a legacy session: the caller has %d open", self._sessions.max_per_user)
            await _too_many_sessions(self._sessions.max_per_user)(scope, receive, send)
            return
        settled = False

        async def watch(message: Message) -> None:
            nonlocal settled
            if message["type"] == "http.response.start" and not settled:
                opened = None
                if message["status"] < 400:
                    for name, value in message.get("headers", ()):
                        if name.lower() == _SESSION_HEADER:
                            opened = value.decode("latin-1")
                # Before the client hears the session id, so that its very next request counts.
                settled = True
                self._sessions.settle(owner, opened, principal)
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if not settled:
                self._sessions.settle(owner, None, principal)

    async def _within(
        self, principal: AuthorizationContext, session_id: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        # The SDK answers any other principal, even the same user's other credential, with a 404
        # while it keeps the session: such a request neither ends the session nor keeps it alive.
        if not self._sessions.opened_by(session_id, principal):
            await self.app(scope, receive, send)
            return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                # Before the client hears it: the session is gone once its DELETE is answered.
                if status == 404 or (scope["method"] == "DELETE" and status < 300):
                    self._sessions.end(session_id)
            await send(message)

        self._sessions.request_started(session_id)
        try:
            await self.app(scope, receive, watch)
        finally:
            self._sessions.request_finished(session_id)


def _too_many_sessions(cap: int) -> Response:
    message = (
        f"Too many open MCP sessions for this account: at most {cap} at a time. Close sessions you "
        "no longer use (HTTP DELETE /mcp with their Mcp-Session-Id) or wait for idle ones to time out."
    )
    return refusal(message, status_code=429)
