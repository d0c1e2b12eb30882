"""`DATABASE_LOCK_TIMEOUT_SECONDS`: a statement waiting for a lock held elsewhere fails after it,
on both backends, instead of holding its connection until the lock is released."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlmodel import func, select

from service.billing.plans import CreditPack
from service.billing.usage import PaidCall, credit_balance, grant_credits
from service.billing.usage_models import UsageRecord
from service.billing.usage_postgres import PostgresDecisions
from service.db.engine import SessionLimits, create_engine, create_session_factory
from service.identity.models import User
from tests.support.databases import DatabaseTemplates

PACK = CreditPack(id="calls_2", name="2 calls", lookup_key="k2", credits=2, amount=100, currency="usd")
# Long enough that a statement still waiting then was never going to give up by itself.
STUCK = 30.0


async def test_sqlite_connections_wait_for_the_write_lock_as_long_as_configured(
    sqlite_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    engine = create_engine(
        sqlite_templates.fresh_url(tmp_path), limits=SessionLimits(lock_timeout_seconds=0.25)
    )
    try:
        async with engine.connect() as connection:
            assert (await connection.execute(text("PRAGMA busy_timeout"))).scalar() == 250
    finally:
        await engine.dispose()


async def test_postgres_sessions_wait_for_locks_as_long_as_configured(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    engine = create_engine(pg_templates.fresh_url(tmp_path), limits=SessionLimits(lock_timeout_seconds=0.25))
    try:
        async with engine.connect() as connection:
            raw = (await connection.get_raw_connection()).driver_connection
            assert isinstance(raw, psycopg.AsyncConnection)
            # Setting it left no transaction open on the new connection.
            assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert (await connection.execute(text("SHOW lock_timeout"))).scalar() == "250ms"
    finally:
        await engine.dispose()


async def test_a_paid_call_behind_a_stuck_lock_fails_and_spends_nothing(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    database_url = pg_templates.fresh_url(tmp_path)
    engine = create_engine(database_url, limits=SessionLimits(lock_timeout_seconds=0.2))
    sessions = create_session_factory(engine)
    try:
        async with sessions() as session, session.begin():
            session.add(User(id="usr_stuck", username="stuck", password_hash="!"))
            await session.flush()
            await grant_credits(session, "usr_stuck", PACK, source="checkout:cs_1", payment_intent_id=None)
        call = PaidCall(user_id="usr_stuck", tool="sql_explain", call_key="behind-the-lock")
        async with sessions() as holder, holder.begin():
            connection = await holder.connection()
            await connection.execute(
                text("SELECT balance FROM credit_balance WHERE user_id = 'usr_stuck' FOR UPDATE")
            )
            with pytest.raises(psycopg.errors.LockNotAvailable):
                async with PostgresDecisions.open(
                    database_url, limits=SessionLimits(lock_timeout_seconds=0.2)
                ) as decisions:
                    await asyncio.wait_for(decisions.spend_credit(call), STUCK)
        async with sessions() as session:
            assert await credit_balance(session, "usr_stuck") == 2
            used = await session.exec(select(func.count()).select_from(UsageRecord))
            assert used.one() == 0
    finally:
        await engine.dispose()
