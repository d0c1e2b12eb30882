"""What a database that cannot answer now raises, whichever way it was reached.

Down or unreachable, a lock held longer than the lock timeout, no connection free in time, a full
disk: through SQLAlchemy (its wrappers), psycopg's own connections, or SQLite's in place. Work that
meets one of these did not happen and is worth retrying, unlike a bug.
"""

from __future__ import annotations

import sqlite3

import psycopg
import sqlalchemy.exc

DATABASE_UNAVAILABLE = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    psycopg.OperationalError,
    sqlite3.OperationalError,
)


def unavailable_cause(exc: BaseException) -> str:
    """The driver's error behind `exc` for the server's log: its class and the first line of its
    message (which can name hosts, so it never goes to a client)."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0][:200]}" if lines else type(cause).__name__
