"""The paid-call decisions' own PostgreSQL connections: in autocommit, with the lock timeout, and
replaced after an idle spell when the database dropped them meanwhile."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from service.db.autocommit_pool import autocommit_pool
from service.db.engine import SessionLimits
from tests.support.databases import DatabaseTemplates


async def _terminate(url: str, backend_pid: int) -> None:
    """Ends a server process from the outside, as a database restart or an idle cutoff would."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (backend_pid,))


async def test_connections_come_in_autocommit_with_the_session_limits(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    url = pg_templates.fresh_url(tmp_path)
    async with (
        autocommit_pool(url, size=2, name="test-pool", limits=SessionLimits(0.25, 90, 45)) as pool,
        pool.connection() as connection,
    ):
        assert connection.autocommit
        assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        cursor = await connection.execute("SHOW lock_timeout")
        assert await cursor.fetchone() == ("250ms",)
        cursor = await connection.execute("SHOW idle_in_transaction_session_timeout")
        assert await cursor.fetchone() == ("90s",)
        cursor = await connection.execute("SHOW statement_timeout")
        assert await cursor.fetchone() == ("45s",)
        cursor = await connection.execute("SHOW application_name")
        assert await cursor.fetchone() == ("test-pool",)


@pytest.mark.parametrize("idle_ping_after", [0.0, 3600.0])
async def test_a_connection_dropped_while_idle_is_replaced_after_the_idle_spell(
    pg_templates: DatabaseTemplates, tmp_path: Path, idle_ping_after: float
) -> None:
    """With no ping due yet (3600 s), the dropped connection is handed out and fails: the ping is
    what saves the next caller."""
    url = pg_templates.fresh_url(tmp_path)
    async with autocommit_pool(url, size=1, name="test-pool", idle_ping_after=idle_ping_after) as pool:
        async with pool.connection() as connection:
            dropped = connection.info.backend_pid
        await _terminate(url, dropped)
        if idle_ping_after > 0:
            with pytest.raises(psycopg.OperationalError):
                async with pool.connection() as connection:
                    await connection.execute("SELECT 1")
            return
        async with pool.connection() as connection:
            await connection.execute("SELECT 1")
            assert connection.info.backend_pid != dropped


async def test_a_database_that_cannot_be_reached_fails_the_caller_soon() -> None:
    unreachable = "postgresql://postgres@127.0.0.1:1/nowhere"  # nothing listens on port 1
    async with autocommit_pool(unreachable, size=1, name="test-pool", connection_wait_seconds=0.3) as pool:
        with pytest.raises(psycopg.OperationalError):  # psycopg_pool's PoolTimeout is one
            async with pool.connection():
                pass
