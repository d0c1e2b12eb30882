"""SQLite: the paid-call decisions connection leaves checkpoints to a worker thread (service.db.wal)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from service.db.engine import create_engine, open_sqlite_connection
from service.db.wal import WalCheckpoints

# About 500 pages each: three of them pass SQLite's automatic checkpoint at 1,000 pages of log.
BLOB_BYTES = 2_000_000


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    made = create_engine(f"sqlite:///{tmp_path / 'wal.db'}")
    async with made.begin() as connection:  # the engine's pragmas put the file in WAL mode
        await connection.exec_driver_sql("CREATE TABLE filler (body BLOB NOT NULL)")
    try:
        yield made
    finally:
        await made.dispose()


def write_blob(connection: sqlite3.Connection) -> None:
    connection.execute("INSERT INTO filler (body) VALUES (zeroblob(?))", (BLOB_BYTES,))


def file_bytes(tmp_path: Path) -> int:
    """The database file itself, without its log."""
    return (tmp_path / "wal.db").stat().st_size


async def test_by_default_a_commit_past_a_thousand_pages_checkpoints_itself(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    connection = open_sqlite_connection(engine)
    try:
        for _ in range(3):
            write_blob(connection)
    finally:
        connection.close()
    assert file_bytes(tmp_path) > 3 * BLOB_BYTES


async def test_without_automatic_checkpoints_the_log_waits_for_enough_commits(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    checkpoints = WalCheckpoints(str(tmp_path / "wal.db"), after_commits=3, max_wait_seconds=3600)
    connection = open_sqlite_connection(engine, automatic_checkpoints=False)
    try:
        for _ in range(2):
            write_blob(connection)
            checkpoints.wrote()
            await checkpoints.run()
        write_blob(connection)
        checkpoints.wrote()
        assert file_bytes(tmp_path) < BLOB_BYTES, "1,500 pages in the log, none copied by the commits"
        assert checkpoints.commits_waiting == 3
        await checkpoints.run()
        assert checkpoints.commits_waiting == 0
        assert file_bytes(tmp_path) > 3 * BLOB_BYTES
        rows = connection.execute("SELECT count(*), sum(length(body)) FROM filler").fetchone()
        assert rows == (3, 3 * BLOB_BYTES)
    finally:
        connection.close()


async def test_a_lone_commit_is_checkpointed_once_it_has_waited_long_enough(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    checkpoints = WalCheckpoints(str(tmp_path / "wal.db"), after_commits=1000, max_wait_seconds=0)
    connection = open_sqlite_connection(engine, automatic_checkpoints=False)
    try:
        await checkpoints.run()  # nothing written: nothing to do
        write_blob(connection)
        assert file_bytes(tmp_path) < BLOB_BYTES
        checkpoints.wrote()
        await checkpoints.run()
        assert file_bytes(tmp_path) > BLOB_BYTES
    finally:
        connection.close()


def test_only_an_sqlite_file_has_a_log_to_checkpoint() -> None:
    assert WalCheckpoints.for_engine(create_engine("postgresql+psycopg://user@127.0.0.1:1/none")) is None
