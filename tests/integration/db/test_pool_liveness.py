"""Pooled PostgreSQL connections: pinged after sitting idle, not on every checkout."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from service.db.engine import create_engine
from tests.support.databases import DatabaseTemplates


async def kill_other_connections(database_url: str) -> int:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        cursor = await admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


async def test_an_idle_connection_that_died_is_replaced_before_use(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    database_url = pg_templates.fresh_url(tmp_path)
    engine = create_engine(database_url, idle_ping_after=0)  # every connection counts as idle
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
        assert await kill_other_connections(database_url) == 1  # the pooled one (a restart, say)
        async with engine.connect() as connection:
            assert (await connection.execute(text("SELECT 2"))).scalar() == 2
    finally:
        await engine.dispose()


async def test_a_recently_used_connection_is_not_pinged(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    database_url = pg_templates.fresh_url(tmp_path)
    engine = create_engine(database_url, idle_ping_after=3600)
    try:
        async with engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
        assert await kill_other_connections(database_url) == 1
        with pytest.raises(DBAPIError) as failure:
            async with engine.connect() as connection:
                await connection.execute(text("SELECT 2"))
        assert failure.value.connection_invalidated
        async with engine.connect() as connection:  # the failure invalidated the pool
            assert (await connection.execute(text("SELECT 3"))).scalar() == 3
    finally:
        await engine.dispose()
