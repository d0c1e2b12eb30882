"""Checkpoints of an SQLite write-ahead log, run in a worker thread.

SQLite copies its log into the database file (a checkpoint, with its syncs) in whichever connection
commits once the log passes a thousand pages. The connection that decides paid calls commits on
the event loop's thread (`service.billing.usage_sqlite`), where that copy would stall every
request for milliseconds. It turns those automatic checkpoints off and counts its commits; a timer
(`run`) checkpoints from a worker thread once there are enough of them, or once the oldest has
waited long enough. A passive checkpoint takes no write lock: writers go on meanwhile, and frames
still read by a reader wait for the next one. Each checkpoint also costs the next commit one sync
(the log starts over with a new header), so they are spaced by commits, not run on every tick.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time

import anyio.to_thread
from sqlalchemy.ext.asyncio import AsyncEngine

from service.db.engine import sqlite_file

# How often the timer looks (`run`).
CHECKPOINT_SECONDS = 0.25
# Commits of about ten pages each: a log of a few thousand pages, a few times SQLite's own default.
CHECKPOINT_AFTER_COMMITS = 256
# The longest a commit's pages wait in the log for a checkpoint.
CHECKPOINT_MAX_WAIT_SECONDS = 5.0


class WalCheckpoints:
    """Checkpoints one SQLite file's log in a worker thread, for a connection that does not
    checkpoint by itself and reports its commits (`wrote`)."""

    def __init__(
        self,
        path: str,
        *,
        after_commits: int = CHECKPOINT_AFTER_COMMITS,
        max_wait_seconds: float = CHECKPOINT_MAX_WAIT_SECONDS,
    ) -> None:
        self._path = path
        self._after_commits = after_commits
        self._max_wait = max_wait_seconds
        self._commits = 0
        self._first_commit_at = 0.0

    @classmethod
    def for_engine(cls, engine: AsyncEngine) -> WalCheckpoints | None:
        """For an engine on an SQLite file; None for any other database."""
        path = sqlite_file(engine)
        return None if path is None else cls(path)

    @property
    def commits_waiting(self) -> int:
        """Commits since the last checkpoint."""
        return self._commits

    def wrote(self) -> None:
        """A connection without automatic checkpoints committed."""
        if self._commits == 0:
            self._first_commit_at = time.monotonic()
        self._commits += 1

    async def run(self) -> None:
        """Checkpoints in a worker thread when enough commits wait, or one waited long enough."""
        if self._commits == 0:
            return
        if self._commits < self._after_commits and time.monotonic() - self._first_commit_at < self._max_wait:
            return
        self._commits = 0
        await anyio.to_thread.run_sync(self.checkpoint)

    def checkpoint(self) -> None:
        """A passive checkpoint, on a connection of its own."""
        with contextlib.closing(sqlite3.connect(self._path, isolation_level=None)) as connection:
            connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
