"""Whether this replica should receive traffic: the database answers and its schema is not behind.

Rolling deploys run the migration first, so old replicas keep serving a database one revision
ahead of their code (migrations stay compatible with the previous release), and an image rolled
back after a migration still becomes ready. Only a database behind this code's head (or not
migrated) makes the replica unready. A database that stops answering makes it unready only after
`outage_grace` has passed, so a short outage does not empty the Service at once; a replica that
has never reached its database is unready from the start.

`/readyz` answers whoever asks, so a report is reused for `cache_seconds` after its check ends, and
probes that arrive while a check runs wait for that check instead of starting their own: any number
of probes costs at most one check (one connection, on SQLite one write lock) per `cache_seconds`.
The report names states only; revisions and errors go to the log, not to anonymous callers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from service.db.migrations import revision_on

logger = logging.getLogger(__name__)

# No schema state logged yet (None is a state: a database never migrated).
_NOT_REPORTED = object()


@dataclass(frozen=True)
class ReadinessReport:
    ready: bool
    checks: dict[str, str]


class Readiness:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        head: str | None,
        known_revisions: set[str],
        outage_grace: float,
        cache_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._head = head
        self._known = known_revisions
        self._outage_grace = outage_grace
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._reached_once = False
        self._unreachable_since: float | None = None
        self._reported_revision: object = _NOT_REPORTED
        self._cached: ReadinessReport | None = None
        self._fresh_until = 0.0
        self._running: asyncio.Future[ReadinessReport] | None = None

    async def check(self) -> ReadinessReport:
        """The latest report while it is fresh, else the one the check running now (or started
        now) makes; a caller cancelled while waiting does not cancel the check others wait for."""
        if self._cached is not None and self._clock() < self._fresh_until:
            return self._cached
        running = self._running
        if running is None:
            running = self._running = asyncio.ensure_future(self._check_and_keep())
            running.add_done_callback(self._forget)
        return await asyncio.shield(running)

    async def _check_and_keep(self) -> ReadinessReport:
        report = await self._check()
        self._cached, self._fresh_until = report, self._clock() + self._cache_seconds
        return report

    def _forget(self, done: asyncio.Future[ReadinessReport]) -> None:
        """Lets the next stale probe start a check, also after one that failed or was cancelled."""
        if self._running is done:
            self._running = None

    def _schema(self, revision: str | None) -> tuple[bool, str]:
        if revision == self._head:
            self._reported_revision = _NOT_REPORTED  # a later move away from head is logged again
            return True, "ok"
        behind = revision is None or revision in self._known
        if revision != self._reported_revision:  # once per revision, not once per check
            self._reported_revision = revision
            if behind:
                logger.warning(
                    "database is at revision %s, behind this code's head %s: not ready", revision, self._head
                )
            else:
                logger.warning(
                    "database is at revision %s, unknown to this code (head %s): taken as newer; serving",
                    revision,
                    self._head,
                )
        return (False, "behind") if behind else (True, "ahead")

    async def _check(self) -> ReadinessReport:
        try:
            # One connection (on SQLite one write lock) for both the ping and the revision.
            async with self._engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
                revision = await revision_on(connection)
        except Exception as exc:  # any failure to reach the database counts as an outage
            return self._outage(exc)
        self._reached_once = True
        self._unreachable_since = None
        schema_ready, schema = self._schema(revision)
        return ReadinessReport(schema_ready, {"database": "ok", "migrations": schema})

    def _outage(self, error: Exception) -> ReadinessReport:
        now = self._clock()
        if self._unreachable_since is None:
            self._unreachable_since = now
            logger.warning("database unreachable for readiness: %s: %s", type(error).__name__, error)
        down_for = now - self._unreachable_since
        ready = self._reached_once and down_for < self._outage_grace
        return ReadinessReport(ready, {"database": "unreachable"})
