"""`DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS`: on PostgreSQL a session left inside a transaction
doing nothing is ended by the server, and the locks it held are released."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from service.db.engine import SessionLimits, create_engine
from tests.support.databases import DatabaseTemplates
from tests.support.polling import until


async def test_postgres_sessions_get_the_configured_limit(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    url = pg_templates.fresh_url(tmp_path)
    for seconds, shown in ((60.0, "1min"), (0.0, "0")):
        engine = create_engine(url, limits=SessionLimits(idle_in_transaction_timeout_seconds=seconds))
        try:
            async with engine.connect() as connection:
                raw = (await connection.get_raw_connection()).driver_connection
                assert isinstance(raw, psycopg.AsyncConnection)
                assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                result = await connection.execute(text("SHOW idle_in_transaction_session_timeout"))
                assert result.scalar() == shown
        finally:
            await engine.dispose()


async def test_a_transaction_left_idle_is_ended_and_its_locks_released(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    url = pg_templates.fresh_url(tmp_path)
    forgetful = create_engine(url, limits=SessionLimits(idle_in_transaction_timeout_seconds=0.3))
    other = create_engine(url, limits=SessionLimits(lock_timeout_seconds=30))
    try:
        async with other.begin() as connection:
            await connection.execute(text("CREATE TABLE counter (id int PRIMARY KEY, n int)"))
            await connection.execute(text("INSERT INTO counter VALUES (1, 0)"))
        async with forgetful.connect() as stuck:
            await stuck.begin()
            await stuck.execute(text("SELECT n FROM counter WHERE id = 1 FOR UPDATE"))
            stuck_pid = (await stuck.execute(text("SELECT pg_backend_pid()"))).scalar()

            async with other.begin() as connection:
                # Waits for the row until the server ends the idle transaction holding it.
                await connection.execute(text("UPDATE counter SET n = n + 1 WHERE id = 1"))

            async def ended() -> bool:
                async with other.connect() as connection:
                    rows = await connection.execute(
                        text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": stuck_pid}
                    )
                    return rows.scalar() == 0

            await until(ended, "the idle transaction's session ended by the server")
            with pytest.raises(DBAPIError):
                await stuck.execute(text("SELECT 1"))
    finally:
        await forgetful.dispose()
        await other.dispose()
