"""Whether this replica should receive traffic: the database answers and its schema is not behind.

Rolling deploys run the migration first, so old replicas keep serving a database one revision
ahead of their code (migrations stay compatible with the previous release), and an image rolled
back after a migration still becomes ready. Only a database behind this code's head (or not
migrated) makes the replica unready. A database that stops answering makes it unready only after
`outage_grace` has passed, so a short outage does not empty the Service at once; a replica that
has never reached its database is unready from the start.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from service.db.migrations import current_revision

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadinessReport:
    ready: bool
    checks: dict[str, str]


class Readiness:
    def __init__(
        self, engine: AsyncEngine, *, head: str | None, known_revisions: set[str], outage_grace: float
    ) -> None:
        self._engine = engine
        self._head = head
        self._known = known_revisions
        self._outage_grace = outage_grace
        self._reached_once = False
        self._unreachable_since: float | None = None
        self._reported_ahead: str | None = None

    def _schema(self, revision: str | None) -> tuple[bool, str]:
        if revision == self._head:
            return True, "ok"
        if revision is None or revision in self._known:
            return False, f"behind: at {revision}, this code's head is {self._head}"
        if revision != self._reported_ahead:  # once per revision, not once per probe
            self._reported_ahead = revision
            logger.warning(
                "database is at revision %s, unknown to this code (head %s): taken as newer; serving",
                revision,
                self._head,
            )
        return True, f"ahead: at {revision}, this code's head is {self._head}"

    async def check(self) -> ReadinessReport:
        try:
            async with self._engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
            revision = await current_revision(self._engine)
        except Exception as exc:  # any failure to reach the database counts as an outage
            return self._outage(type(exc).__name__)
        self._reached_once = True
        self._unreachable_since = None
        schema_ready, schema = self._schema(revision)
        return ReadinessReport(schema_ready, {"database": "ok", "migrations": schema})

    def _outage(self, error: str) -> ReadinessReport:
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
        down_for = now - self._unreachable_since
        if self._reached_once and down_for < self._outage_grace:
            detail = f"unreachable ({error}) for {down_for:.0f} s; unready after {self._outage_grace:.0f} s"
            return ReadinessReport(True, {"database": detail})
        return ReadinessReport(False, {"database": f"unreachable: {error}"})
