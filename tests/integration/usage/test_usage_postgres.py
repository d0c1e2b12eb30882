"""PostgreSQL's decisions under the races their statements must settle by themselves: two
deliveries of one call, and a balance emptied while a spend waits for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from sqlalchemy import event, text
from sqlmodel import col, func, select

from service.billing.plans import CreditPack
from service.billing.usage import PaidCall, credit_balance, grant_credits, ledger_sum
from service.billing.usage_models import UsageCounter, UsageRecord
from service.billing.usage_postgres import PostgresDecisions
from service.db.engine import checked_out_connections
from tests.integration.usage.conftest import Ledger
from tests.support.polling import until

PACK = CreditPack(id="calls_2", name="2 calls", lookup_key="k2", credits=2, amount=100, currency="usd")


@pytest.fixture
def postgres(ledger: Ledger) -> Ledger:
    if ledger.engine.url.get_backend_name() != "postgresql":
        pytest.skip("PostgreSQL's decisions")
    return ledger


async def _balance(ledger: Ledger) -> tuple[int, int, int]:
    """The balance row, the ledger's sum and the usage rows."""
    async with ledger.sessions() as session:
        rows = await session.exec(select(func.count()).where(col(UsageRecord.user_id) == ledger.user_id))
        return (
            await credit_balance(session, ledger.user_id),
            await ledger_sum(session, ledger.user_id),
            int(rows.one()),
        )


@asynccontextmanager
async def _balance_locked(ledger: Ledger) -> AsyncIterator[None]:
    """The user's balance row locked by another transaction until the block ends."""
    async with ledger.sessions() as session, session.begin():
        connection = await session.connection()
        await connection.execute(
            text("SELECT balance FROM credit_balance WHERE user_id = :user FOR UPDATE"),
            {"user": ledger.user_id},
        )
        yield


async def _waiting_for_locks(ledger: Ledger, count: int) -> None:
    async def waiting() -> bool:
        async with ledger.engine.connect() as connection:
            rows = await connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
            return int(rows.scalar_one()) == count

    await until(waiting, f"{count} decisions wait for the balance row")


async def test_two_deliveries_of_one_call_in_flight_together_pay_once(postgres: Ledger) -> None:
    async with postgres.sessions() as session, session.begin():
        await grant_credits(session, postgres.user_id, PACK, source="checkout:cs_1", payment_intent_id=None)
    decisions = PostgresDecisions(postgres.engine)
    call = PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key="the-call")
    async with _balance_locked(postgres):
        # Both statements start before either has written: neither sees the other's usage row.
        both = asyncio.gather(decisions.spend_credit(call), decisions.spend_credit(call))
        await _waiting_for_locks(postgres, 2)
    assert list(await both) == [True, True]
    assert await _balance(postgres) == (1, 1, 1), "one credit spent, one usage row"


async def test_a_spend_waiting_on_an_emptied_balance_is_refused_and_writes_nothing(postgres: Ledger) -> None:
    async with postgres.sessions() as session, session.begin():
        await grant_credits(session, postgres.user_id, PACK, source="checkout:cs_1", payment_intent_id=None)
    decisions = PostgresDecisions(postgres.engine)
    calls = [PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key=f"call-{n}") for n in range(3)]
    async with _balance_locked(postgres):
        # All three saw two credits when they started; the row they wait for will say otherwise.
        spends = asyncio.gather(*(decisions.spend_credit(call) for call in calls))
        await _waiting_for_locks(postgres, 3)
    assert sorted(await spends) == [False, True, True]
    assert await _balance(postgres) == (0, 0, 2)


async def test_decisions_hold_at_most_their_share_of_the_pool(postgres: Ledger) -> None:
    """Beyond the pool's kept connections each extra one is opened and closed again: a burst of
    calls queues for the decisions' few connections instead."""
    async with postgres.sessions() as session, session.begin():
        await grant_credits(session, postgres.user_id, PACK, source="checkout:cs_1", payment_intent_id=None)
    pool = postgres.engine.sync_engine.pool
    most = 0

    def checked_out(*_args: object) -> None:
        nonlocal most
        most = max(most, checked_out_connections(postgres.engine))

    event.listen(pool, "checkout", checked_out)
    decisions = PostgresDecisions(postgres.engine, concurrent=3)
    calls = [PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key=f"call-{n}") for n in range(40)]
    try:
        results = await asyncio.gather(*(decisions.spend_credit(call) for call in calls))
    finally:
        event.remove(pool, "checkout", checked_out)
    assert sorted(results) == [False] * 38 + [True] * 2
    assert 1 <= most <= 3, most


async def test_two_deliveries_of_one_included_call_count_once(postgres: Ledger) -> None:
    subscription = await postgres.subscribe("pro")
    decisions = PostgresDecisions(postgres.engine)
    columns = {"plan_id": "pro", "subscription_id": subscription.id, "period": "p1"}

    def call(key: str) -> PaidCall:
        return PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key=key)

    assert await decisions.count(call("first"), columns, 5, {})
    async with postgres.sessions() as session, session.begin():
        connection = await session.connection()
        await connection.execute(
            text("SELECT used FROM usage_counter WHERE subscription_id = :id FOR UPDATE"),
            {"id": subscription.id},
        )
        # One delivery waits for the counter, the other for the first's usage row.
        both = asyncio.gather(
            decisions.count(call("second"), columns, 5, {}), decisions.count(call("second"), columns, 5, {})
        )
        await _waiting_for_locks(postgres, 2)
    assert list(await both) == [True, True]
    async with postgres.sessions() as session:
        used = await session.get(UsageCounter, (subscription.id, "p1"))
        assert used is not None and used.used == 2
    assert (await _balance(postgres))[2] == 2, "one usage row per call"


async def test_past_the_included_calls_nothing_metering_refuses_and_writes_nothing(postgres: Ledger) -> None:
    subscription = await postgres.subscribe("pro")
    decisions = PostgresDecisions(postgres.engine)
    columns = {"plan_id": "pro", "subscription_id": subscription.id, "period": "p1"}
    calls = [PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key=f"call-{n}") for n in range(3)]
    assert [await decisions.count(call, columns, 2, {}) for call in calls] == [True, True, False]
    assert (await _balance(postgres))[2] == 2, "the refused call left no usage row"
