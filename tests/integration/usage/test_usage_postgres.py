"""PostgreSQL's decisions under the races their statements must settle by themselves: two
deliveries of one call, and a balance emptied while a spend waits for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import event, text
from sqlmodel import col, func, select

from service.billing.plans import CreditPack
from service.billing.usage import PaidCall, credit_balance, grant_credits, ledger_sum
from service.billing.usage_models import UsageCounter, UsageRecord
from service.billing.usage_postgres import PostgresDecisions
from service.db.engine import SessionLimits
from service.observability.metrics import ServiceMetrics
from tests.integration.usage.conftest import Ledger, waiting_for_locks
from tests.support.polling import until

# Long enough that a decision still waiting for a lock then was never going to give up by itself.
STUCK = 30.0
PACK = CreditPack(id="calls_2", name="2 calls", lookup_key="k2", credits=2, amount=100, currency="usd")
ONE = CreditPack(id="calls_1", name="1 call", lookup_key="k1", credits=1, amount=50, currency="usd")


def decisions_of(ledger: Ledger) -> PostgresDecisions:
    assert ledger.decisions is not None, "the PostgreSQL ledger has its decisions"
    return ledger.decisions


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


async def test_two_deliveries_of_one_call_in_flight_together_pay_once(postgres: Ledger) -> None:
    async with postgres.sessions() as session, session.begin():
        await grant_credits(session, postgres.user_id, PACK, source="checkout:cs_1", payment_intent_id=None)
    decisions = decisions_of(postgres)
    call = PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key="the-call")
    async with _balance_locked(postgres):
        # Both statements start before either has written: neither sees the other's usage row.
        both = asyncio.gather(decisions.spend_credit(call), decisions.spend_credit(call))
        await waiting_for_locks(postgres, 2)
    decided = list(await both)
    assert [decision.allowed for decision in decided] == [True, True]
    retried = sorted(decision.usage_id is None for decision in decided)
    assert retried == [False, True], "one recorded the call, the other is its retry"
    assert await _balance(postgres) == (1, 1, 1), "one credit spent, one usage row"


async def test_two_deliveries_of_one_call_paying_with_the_last_credit_both_pass(postgres: Ledger) -> None:
    async with postgres.sessions() as session, session.begin():
        await grant_credits(session, postgres.user_id, ONE, source="checkout:cs_1", payment_intent_id=None)
    decisions = decisions_of(postgres)
    call = PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key="the-call")
    async with _balance_locked(postgres):
        # The second finds the balance emptied by the first, whose usage row its snapshot predates.
        both = asyncio.gather(decisions.spend_credit(call), decisions.spend_credit(call))
        await waiting_for_locks(postgres, 2)
    decided = await both
    assert [decision.allowed for decision in decided] == [True, True], "a paid call's retry passes"
    assert await _balance(postgres) == (0, 0, 1), "one credit spent, one usage row"
    other = PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key="another-call")
    assert not (await decisions.spend_credit(other)).allowed, "another call with no credit left is refused"
    assert await _balance(postgres) == (0, 0, 1)


async def test_a_spend_waiting_on_an_emptied_balance_is_refused_and_writes_nothing(postgres: Ledger) -> None:
    async with postgres.sessions() as session, session.begin():
        await grant_credits(session, postgres.user_id, PACK, source="checkout:cs_1", payment_intent_id=None)
    decisions = decisions_of(postgres)
    calls = [PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key=f"call-{n}") for n in range(3)]
    async with _balance_locked(postgres):
        # All three saw two credits when they started; the row they wait for will say otherwise.
        spends = asyncio.gather(*(decisions.spend_credit(call) for call in calls))
        await waiting_for_locks(postgres, 3)
    assert sorted(decision.allowed for decision in await spends) == [False, True, True]
    assert await _balance(postgres) == (0, 0, 2)


async def _decision_backends(ledger: Ledger) -> set[int]:
    """The server processes of the decisions' connections to the ledger's database now."""
    async with ledger.engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = 'paid-call-decisions'"
            )
        )
        return {int(pid) for pid in rows.scalars()}


async def test_a_burst_of_decisions_shares_a_few_connections_kept_open(postgres: Ledger) -> None:
    """A burst of calls queues for the decisions' few connections, which stay open for the next
    burst, instead of opening (and closing again) a connection per call; the engine's pool is not
    used."""
    async with postgres.sessions() as session, session.begin():
        await grant_credits(session, postgres.user_id, PACK, source="checkout:cs_1", payment_intent_id=None)
    engine_pool = postgres.engine.sync_engine.pool
    engine_checkouts = 0

    def checked_out(*_args: object) -> None:
        nonlocal engine_checkouts
        engine_checkouts += 1

    url = postgres.engine.url.render_as_string(hide_password=False)
    async with PostgresDecisions.open(url, concurrent=3) as decisions:
        bursts = []
        for burst in range(2):
            calls = [
                PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key=f"call-{burst}-{n}")
                for n in range(40)
            ]
            event.listen(engine_pool, "checkout", checked_out)
            try:
                decided = await asyncio.gather(*(decisions.spend_credit(call) for call in calls))
                bursts.append([decision.allowed for decision in decided])
            finally:
                event.remove(engine_pool, "checkout", checked_out)
            backends = await _decision_backends(postgres)
            assert 1 <= len(backends) <= 3, backends
            if burst == 0:
                first_backends = backends
        # The pool opens connections in the background as a burst needs them: one asked for late in
        # the first burst may join only after it. What matters is that none was closed and none
        # beyond the three was opened.
        assert first_backends <= backends, "the first burst's connections stayed open for the next"
    assert sorted(bursts[0]) == [False] * 38 + [True] * 2
    assert bursts[1] == [False] * 40
    assert engine_checkouts == 0

    async def all_gone() -> bool:  # a server process ends a moment after its client closed
        return await _decision_backends(postgres) == set()

    await until(all_gone, "the decisions' connections closed with the block")


async def test_decision_connections_are_left_idle_between_decisions(postgres: Ledger) -> None:
    decisions = decisions_of(postgres)
    await decisions.spend_credit(PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key="one"))
    async with postgres.engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT state FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = 'paid-call-decisions'"
            )
        )
        assert list(rows.scalars()) == ["idle"], "no transaction left open between decisions"


async def test_two_deliveries_of_one_included_call_count_once(postgres: Ledger) -> None:
    subscription = await postgres.subscribe("pro")
    decisions = decisions_of(postgres)
    columns = {"plan_id": "pro", "subscription_id": subscription.id, "period": "p1"}

    def call(key: str) -> PaidCall:
        return PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key=key)

    assert (await decisions.count(call("first"), columns, 5, {})).allowed
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
        await waiting_for_locks(postgres, 2)
    assert [decision.allowed for decision in await both] == [True, True]
    async with postgres.sessions() as session:
        used = await session.get(UsageCounter, (subscription.id, "p1"))
        assert used is not None and used.used == 2
    assert (await _balance(postgres))[2] == 2, "one usage row per call"


async def test_past_the_included_calls_nothing_metering_refuses_and_writes_nothing(postgres: Ledger) -> None:
    subscription = await postgres.subscribe("pro")
    decisions = decisions_of(postgres)
    columns = {"plan_id": "pro", "subscription_id": subscription.id, "period": "p1"}
    calls = [PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key=f"call-{n}") for n in range(3)]
    assert [(await decisions.count(call, columns, 2, {})).allowed for call in calls] == [True, True, False]
    assert (await _balance(postgres))[2] == 2, "the refused call left no usage row"


async def test_the_decisions_queue_is_exported_while_it_builds_up(postgres: Ledger) -> None:
    async with postgres.sessions() as session, session.begin():
        await grant_credits(session, postgres.user_id, PACK, source="checkout:cs_1", payment_intent_id=None)
    url = postgres.engine.url.render_as_string(hide_password=False)
    metrics = ServiceMetrics()
    calls = [PaidCall(user_id=postgres.user_id, tool="sql_explain", call_key=f"call-{n}") for n in range(6)]
    async with PostgresDecisions.open(
        url, concurrent=4, limits=SessionLimits(lock_timeout_seconds=STUCK)
    ) as decisions:
        metrics.watch_usage_decisions(lambda: decisions.waiting, lambda: decisions.deciding)

        def exported() -> tuple[float | None, float | None]:
            return (
                metrics.registry.get_sample_value("paywall_usage_decisions_in_flight"),
                metrics.registry.get_sample_value("paywall_usage_decisions_waiting"),
            )

        assert exported() == (0, 0)
        async with _balance_locked(postgres):
            spends = asyncio.gather(*(decisions.spend_credit(call) for call in calls))
            await waiting_for_locks(postgres, 4)  # four decide (held up by the lock), two wait their turn

            async def queued() -> bool:
                return exported() == (4, 2)

            await until(queued, "four decisions in flight and two waiting, exported")
        assert sorted(decision.allowed for decision in await spends) == [False] * 4 + [True] * 2
        assert exported() == (0, 0)
