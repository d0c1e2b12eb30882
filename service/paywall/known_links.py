"""The payment link each unentitled caller was last handed, kept in memory for a short while.

A client that calls a paid tool again and again before paying gets the same open elicitation each
time; remembering it (and the sessions already owed its notice) answers those repeats without a
database transaction. A change to the user's entitlements forgets their links at once; a link
that another replica expired or replaced is handed out for at most `ttl` seconds more, and its
payment page says what to do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from service.billing.events import EntitlementChanged
from service.db.metadata import utcnow

MAX_ENTRIES = 10_000


@dataclass
class _Link:
    elicitation_id: str
    expires_at: datetime
    fresh_until: float
    sessions: set[str] = field(default_factory=set)


class KnownLinks:
    def __init__(
        self, *, ttl: float, max_entries: int = MAX_ENTRIES, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl
        self._max_entries = max_entries
        self._clock = clock
        self._links: dict[tuple[str, str], _Link] = {}

    def get(self, user_id: str, plan_id: str, mcp_session_id: str | None) -> str | None:
        """The open elicitation to hand out again, if known and this session is already owed it."""
        link = self._links.get((user_id, plan_id))
        if link is None:
            return None
        if link.fresh_until <= self._clock() or link.expires_at <= utcnow():
            del self._links[(user_id, plan_id)]
            return None
        if mcp_session_id is not None and mcp_session_id not in link.sessions:
            return None
        return link.elicitation_id

    def remember(
        self,
        user_id: str,
        plan_id: str,
        elicitation_id: str,
        expires_at: datetime,
        mcp_session_id: str | None,
    ) -> None:
        if self._ttl <= 0:
            return
        key = (user_id, plan_id)
        link = self._links.get(key)
        if link is None or link.elicitation_id != elicitation_id:
            if len(self._links) >= self._max_entries:
                del self._links[next(iter(self._links))]  # the oldest
            link = _Link(elicitation_id, expires_at, self._clock() + self._ttl)
            self._links[key] = link
        if mcp_session_id is not None:
            link.sessions.add(mcp_session_id)

    async def on_change(self, change: EntitlementChanged) -> None:
        for key in [key for key in self._links if key[0] == change.user_id]:
            del self._links[key]
