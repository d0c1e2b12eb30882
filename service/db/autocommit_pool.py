"""A small pool of PostgreSQL driver connections in autocommit, apart from the engine's pool.

For work that is one statement at a time on the hot path (paid-call decisions): taking a
connection from SQLAlchemy's pool and switching it to autocommit and back cost about as much of the
service's CPU as the statement itself. These connections stay in autocommit, get the engine's
session limits (the lock, idle-in-transaction and statement timeouts), and are pinged only when
they sat idle, as the engine's are.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from service.db.engine import IDLE_PING_AFTER_SECONDS, SessionLimits, libpq_url

AutocommitPool = AsyncConnectionPool[psycopg.AsyncConnection[Any]]

# How long a caller waits for a connection (one being opened, or one of the others to come back)
# before it gives up with `psycopg_pool.PoolTimeout`, an `OperationalError`: opening one takes
# milliseconds, so this is about a database that cannot be reached, where failing soon is kinder.
CONNECTION_WAIT_SECONDS = 3.0


@asynccontextmanager
async def autocommit_pool(
    database_url: str,
    *,
    size: int,
    name: str,
    limits: SessionLimits = SessionLimits(),  # noqa: B008 - frozen, so one shared default is safe
    idle_ping_after: float = IDLE_PING_AFTER_SECONDS,
    connection_wait_seconds: float = CONNECTION_WAIT_SECONDS,
) -> AsyncIterator[AutocommitPool]:
    """Up to `size` connections to `database_url`, opened when first needed and closed when the
    block ends, each under `limits`; `name` is theirs in `pg_stat_activity`."""
    statements = limits.postgres_statements()
    returned_at: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = weakref.WeakKeyDictionary()

    async def configure(connection: psycopg.AsyncConnection[Any]) -> None:
        for statement in statements:
            await connection.execute(statement)
        returned_at[connection] = time.monotonic()

    async def check(connection: psycopg.AsyncConnection[Any]) -> None:
        """A ping for a connection that sat idle (the database may have restarted meanwhile); the
        pool replaces one that fails it."""
        if time.monotonic() - returned_at.get(connection, 0.0) >= idle_ping_after:
            await AsyncConnectionPool.check_connection(connection)

    async def reset(connection: psycopg.AsyncConnection[Any]) -> None:
        returned_at[connection] = time.monotonic()

    pool: AutocommitPool = AsyncConnectionPool(
        libpq_url(database_url),
        kwargs={"autocommit": True, "application_name": name},
        min_size=0,
        max_size=size,
        configure=configure,
        check=check,
        reset=reset,
        name=name,
        timeout=connection_wait_seconds,
        open=False,
    )
    await pool.open()
    try:
        yield pool
    finally:
        await pool.close()
