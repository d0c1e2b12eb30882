"""`DATABASE_STATEMENT_TIMEOUT_SECONDS`: on PostgreSQL a statement that runs too long is cancelled,
and its connection goes on serving."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from service.db.engine import SessionLimits, create_engine
from service.db.unavailable import DATABASE_UNAVAILABLE
from tests.support.databases import DatabaseTemplates


async def test_a_statement_running_too_long_is_cancelled(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    url = pg_templates.fresh_url(tmp_path)
    default = create_engine(url)
    bounded = create_engine(url, limits=SessionLimits(statement_timeout_seconds=0.2))
    try:
        async with default.connect() as connection:
            assert (await connection.execute(text("SHOW statement_timeout"))).scalar() == "30s"
        async with bounded.connect() as connection:
            with pytest.raises(DBAPIError) as cancelled:
                await connection.execute(text("SELECT pg_sleep(60)"))
            assert isinstance(cancelled.value.orig, psycopg.errors.QueryCanceled)
            assert isinstance(cancelled.value, DATABASE_UNAVAILABLE), "a paid call behind it fails closed"
            await connection.rollback()
            assert (await connection.execute(text("SELECT 1"))).scalar() == 1
    finally:
        await default.dispose()
        await bounded.dispose()
