"""Engine construction: one URL setting, async drivers chosen per backend."""

from __future__ import annotations

import sqlite3
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.pool import QueuePool
from sqlmodel.ext.asyncio.session import AsyncSession

from service.settings.sections import DatabaseSettings

SessionFactory = async_sessionmaker[AsyncSession]


def _driver_url(url: str, *, sqlite_driver: str, postgres_driver: str) -> str:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return parsed.set(
            drivername=f"sqlite+{sqlite_driver}" if sqlite_driver else "sqlite"
        ).render_as_string(hide_password=False)
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername=f"postgresql+{postgres_driver}").render_as_string(hide_password=False)
    raise ValueError(f"unsupported DATABASE_URL backend {backend!r}: use sqlite:/// or postgresql://")


def async_database_url(url: str) -> str:
    """`DATABASE_URL` as the service's async engine wants it (aiosqlite, psycopg 3)."""
    return _driver_url(url, sqlite_driver="aiosqlite", postgres_driver="psycopg")


def sync_database_url(url: str) -> str:
    """`DATABASE_URL` for Alembic, which runs migrations synchronously."""
    return _driver_url(url, sqlite_driver="", postgres_driver="psycopg")


def libpq_url(url: str) -> str:
    """A PostgreSQL `DATABASE_URL` as libpq (a psycopg connection of our own) takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def ensure_sqlite_directory(url: str) -> None:
    """Create the folder of an SQLite file so the embedded default works on a fresh checkout."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)


SqliteSynchronous = Literal["full", "normal"]
# In WAL mode `normal` syncs the log at checkpoints instead of at every commit: a commit survives
# the process crashing, and only a power loss or OS crash can undo the latest ones (docs/adr/0006).
DEFAULT_SQLITE_SYNCHRONOUS: SqliteSynchronous = "normal"
_sqlite_synchronous: weakref.WeakKeyDictionary[Any, SqliteSynchronous] = weakref.WeakKeyDictionary()


# How long a statement waits for a lock held elsewhere (`DATABASE_LOCK_TIMEOUT_SECONDS`).
DEFAULT_LOCK_TIMEOUT_SECONDS = 5.0


def _milliseconds(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _milliseconds_or_none(seconds: float) -> int:
    """PostgreSQL's value for a timeout of `seconds`, where 0 means none."""
    return _milliseconds(seconds) if seconds else 0


def postgres_lock_timeout(seconds: float) -> str:
    """The `SET` that bounds a PostgreSQL session's lock waits."""
    return f"SET lock_timeout = {_milliseconds(seconds)}"


@dataclass(frozen=True)
class SessionLimits:
    """How long a session's statements may wait and run (`DATABASE_*_TIMEOUT_SECONDS`). SQLite
    takes only the lock timeout, as its busy timeout: its transactions are this process's own."""

    lock_timeout_seconds: float = DEFAULT_LOCK_TIMEOUT_SECONDS
    # A session left in a transaction doing nothing this long is ended by the server (0: never).
    idle_in_transaction_timeout_seconds: float = 60.0
    # A statement running this long is cancelled (0: never).
    statement_timeout_seconds: float = 30.0

    @classmethod
    def of(cls, database: DatabaseSettings) -> SessionLimits:
        return cls(
            lock_timeout_seconds=database.lock_timeout_seconds,
            idle_in_transaction_timeout_seconds=database.idle_in_transaction_timeout_seconds,
            statement_timeout_seconds=database.statement_timeout_seconds,
        )

    def postgres_statements(self) -> tuple[str, ...]:
        """The `SET`s that apply these to a PostgreSQL session: statements, not startup options,
        which PgBouncer refuses."""
        idle = _milliseconds_or_none(self.idle_in_transaction_timeout_seconds)
        return (
            postgres_lock_timeout(self.lock_timeout_seconds),
            f"SET idle_in_transaction_session_timeout = {idle}",
            f"SET statement_timeout = {_milliseconds_or_none(self.statement_timeout_seconds)}",
        )


def _sqlite_pragmas(synchronous: SqliteSynchronous, lock_timeout_seconds: float) -> Any:
    def apply(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={_milliseconds(lock_timeout_seconds)}")
        cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
        cursor.close()
        # We issue BEGIN ourselves (below), so the driver must not start transactions on its own.
        dbapi_connection.isolation_level = None

    return apply


def sqlite_file(engine: AsyncEngine) -> str | None:
    """The database file of an SQLite engine; None for PostgreSQL or an in-memory database."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return url.database


def open_sqlite_connection(engine: AsyncEngine, *, automatic_checkpoints: bool = True) -> sqlite3.Connection:
    """A synchronous connection to an SQLite engine's file, with the engine's pragmas, that fails
    at once instead of waiting when another connection holds the write lock. Without
    `automatic_checkpoints` its commits never copy the log into the file: someone else must
    (`service.db.wal`)."""
    path = sqlite_file(engine)
    if path is None:
        raise ValueError("not an SQLite file database")
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA foreign_keys=ON")
    connection.execute("PRAGMA busy_timeout=0")
    synchronous = _sqlite_synchronous.get(engine.sync_engine, DEFAULT_SQLITE_SYNCHRONOUS)
    connection.execute(f"PRAGMA synchronous={synchronous.upper()}")
    if not automatic_checkpoints:
        connection.execute("PRAGMA wal_autocheckpoint=0")
    return connection


def _sqlite_reset(_dbapi_connection: Any, record: Any, state: Any) -> None:
    """Roll back a connection returned to the pool only when SQLite says a transaction is open: the
    default rollback is a trip to the driver's thread, also after a checkout that ran nothing."""
    if state.transaction_was_reset or not state.asyncio_safe:
        return
    driver = record.driver_connection
    if driver is None or driver.in_transaction:
        record.dbapi_connection.rollback()


def _sqlite_begin_immediate(connection: Any) -> None:
    """Take the write lock at BEGIN: two deferred transactions that both read and then write can
    deadlock, and SQLite answers one of them 'database is locked' at once instead of waiting."""
    connection.exec_driver_sql("BEGIN IMMEDIATE")


@dataclass(frozen=True)
class PoolLimits:
    size: int
    max_overflow: int

    @property
    def max_connections(self) -> int:
        return self.size + self.max_overflow


# One connection for SQLite: see `create_engine`.
SQLITE_POOL = PoolLimits(size=1, max_overflow=0)
POSTGRES_POOL = PoolLimits(size=10, max_overflow=20)


def pool_limits(url: str) -> PoolLimits:
    return SQLITE_POOL if make_url(url).get_backend_name() == "sqlite" else POSTGRES_POOL


def checked_out_connections(engine: AsyncEngine) -> int:
    """Connections of the engine's pool in use now (the pool's own count)."""
    pool = engine.sync_engine.pool
    return pool.checkedout() if isinstance(pool, QueuePool) else 0


def create_engine(
    url: str,
    *,
    echo: bool = False,
    idle_ping_after: float | None = None,
    sqlite_synchronous: SqliteSynchronous = DEFAULT_SQLITE_SYNCHRONOUS,
    limits: SessionLimits = SessionLimits(),
) -> AsyncEngine:
    """The service's engine for `url`, every connection under `limits`."""
    ensure_sqlite_directory(url)
    if make_url(url).get_backend_name() == "sqlite":
        # One connection: every transaction takes SQLite's write lock at BEGIN anyway, so a second
        # connection never ran anything alongside the first. It only waited inside SQLite, whose
        # busy handler sleeps 1, 2, 5 ... 100 ms between tries and leaves the lock idle meanwhile,
        # which made the slowest of concurrent paid calls several times slower
        # (docs/adr/0008-measured-choices.md). Waiting for the pool's one connection is a FIFO
        # queue in this process.
        # A local file needs no liveness ping.
        engine = create_async_engine(
            async_database_url(url),
            echo=echo,
            pool_size=SQLITE_POOL.size,
            max_overflow=SQLITE_POOL.max_overflow,
            pool_reset_on_return=None,
        )
        event.listen(engine.sync_engine.pool, "reset", _sqlite_reset)
        event.listen(
            engine.sync_engine, "connect", _sqlite_pragmas(sqlite_synchronous, limits.lock_timeout_seconds)
        )
        _sqlite_synchronous[engine.sync_engine] = sqlite_synchronous
        event.listen(engine.sync_engine, "begin", _sqlite_begin_immediate)
        return engine
    engine = create_async_engine(
        async_database_url(url),
        echo=echo,
        pool_size=POSTGRES_POOL.size,
        max_overflow=POSTGRES_POOL.max_overflow,
    )
    _ping_connections_idle_for(
        engine, IDLE_PING_AFTER_SECONDS if idle_ping_after is None else idle_ping_after
    )
    event.listen(engine.sync_engine, "connect", _postgres_session_limits(limits.postgres_statements()))
    return engine


def create_engine_for(database: DatabaseSettings) -> AsyncEngine:
    """The engine `DATABASE_*` settings describe: what the service, its CLI and its jobs all use."""
    return create_engine(
        database.url, sqlite_synchronous=database.sqlite_synchronous, limits=SessionLimits.of(database)
    )


def _postgres_session_limits(statements: tuple[str, ...]) -> Any:
    """The session's limits set on a new connection, in autocommit, so it is not left inside a
    transaction."""

    def apply(dbapi_connection: Any, _record: Any) -> None:
        autocommit = dbapi_connection.autocommit
        dbapi_connection.autocommit = True
        cursor = dbapi_connection.cursor()
        try:
            for statement in statements:
                cursor.execute(statement)
        finally:
            cursor.close()
            dbapi_connection.autocommit = autocommit

    return apply


# A connection that was busy moments ago is alive; pinging it anyway (pool_pre_ping) would cost a
# round trip on every transaction, a noticeable part of each webhook (docs/adr/0008-measured-choices.md).
IDLE_PING_AFTER_SECONDS = 5.0


def _ping_connections_idle_for(engine: AsyncEngine, seconds: float) -> None:
    """Pre-ping only connections that sat in the pool longer than `seconds` (a database restart
    while the service was quiet is then noticed before use, not by a failed request)."""

    def checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["checked_in_at"] = time.monotonic()

    def checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        checked_in_at = record.info.get("checked_in_at")
        if checked_in_at is not None and time.monotonic() - checked_in_at < seconds:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError("connection failed its ping") from exc
        if not alive:
            raise DisconnectionError("connection failed its ping")

    event.listen(engine.sync_engine.pool, "checkin", checkin)
    event.listen(engine.sync_engine.pool, "checkout", checkout)


def create_session_factory(engine: AsyncEngine) -> SessionFactory:
    return async_sessionmaker(engine, class_=AsyncSession, expire_on_commit=False)
