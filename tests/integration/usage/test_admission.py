"""Paid-call admission as the paywall runs it: batched decisions, on SQLite in place and on PostgreSQL
through the pool, keep every guarantee of the single decision."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Sequence
from contextlib import AsyncExitStack
from datetime import timedelta

import pytest
from sqlalchemy.engine import make_url
from sqlmodel import col, func, select

from service.billing.events import EntitlementChanged
from service.billing.models import Subscription
from service.billing.plans import CreditPack, MeteredPrice, Plan, PlanCatalog
from service.billing.usage import (
    FUNDED_BY_CREDIT,
    FUNDED_BY_METER,
    Decision,
    PaidCall,
    credit_balance,
    grant_credits,
    included_used,
    ledger_sum,
    take_back_purchase,
)
from service.billing.usage_models import UsageRecord
from service.billing.usage_postgres import PostgresDecisions
from service.billing.usage_sqlite import Busy, SqliteAttempt, SqliteDecisions
from service.db.engine import create_engine, create_session_factory, open_sqlite_connection
from service.db.metadata import utcnow
from service.paywall.admission import Admission
from service.paywall.entitlements import Entitlements
from tests.integration.usage.conftest import Ledger
from tests.support.polling import until

TOOL = "sql_explain"
METERED = MeteredPrice(
    tool=TOOL, lookup_key="m", event_name="sql_explain_calls", unit_amount=2, currency="usd"
)
PRO = Plan(
    id="pro",
    name="Pro",
    lookup_key="pro",
    amount=900,
    currency="usd",
    interval="month",
    tools=(TOOL,),
    included_calls=5,
    overage="block",
)
PAYG = Plan(
    id="payg",
    name="Pay as you go",
    lookup_key="payg",
    amount=0,
    currency="usd",
    interval="month",
    tools=(TOOL,),
    included_calls=0,
    overage="meter",
)
TEAM = Plan(
    id="team",
    name="Team",
    lookup_key="team",
    amount=2900,
    currency="usd",
    interval="month",
    tools=(TOOL,),
    included_calls=3,
    overage="meter",
)
CATALOG = PlanCatalog([PRO, PAYG, TEAM], [METERED])
UNLOCKING = frozenset({PRO.id, PAYG.id, TEAM.id})
PACK = CreditPack(id="calls_50", name="50 calls", lookup_key="k50", credits=50, amount=250, currency="usd")


def admission_for(ledger: Ledger) -> tuple[Admission, Entitlements]:
    entitlements = Entitlements(ledger.sessions, grace=timedelta(days=3), cache_seconds=60.0)
    return Admission(ledger.sessions, CATALOG, entitlements, postgres=ledger.decisions), entitlements


async def grant(ledger: Ledger, user_id: str, source: str = "checkout:cs_1") -> None:
    async with ledger.sessions() as session, session.begin():
        await grant_credits(session, user_id, PACK, source=source, payment_intent_id=None)


async def balance(ledger: Ledger, user_id: str) -> tuple[int, int]:
    async with ledger.sessions() as session:
        return await credit_balance(session, user_id), await ledger_sum(session, user_id)


async def usage_rows(ledger: Ledger, funding: str) -> int:
    async with ledger.sessions() as session:
        count = await session.exec(select(func.count()).where(col(UsageRecord.funding) == funding))
        return int(count.one())


async def admit_all(admission: Admission, calls: Sequence[PaidCall]) -> list[bool | BaseException]:
    """All at once: the group commit takes those submitted together into one batch."""
    verdicts = await asyncio.gather(
        *(admission.admit(call, UNLOCKING) for call in calls), return_exceptions=True
    )
    return [verdict if isinstance(verdict, BaseException) else verdict.allowed for verdict in verdicts]


def calls_of(user_id: str, keys: Sequence[str]) -> list[PaidCall]:
    return [PaidCall(user_id=user_id, tool=TOOL, call_key=key) for key in keys]


async def test_100_parallel_calls_with_50_credits_run_exactly_50(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id)
    admission, entitlements = admission_for(ledger)
    await entitlements.plans_of(ledger.user_id)
    try:
        results = await admit_all(admission, calls_of(ledger.user_id, [f"call-{n}" for n in range(100)]))
    finally:
        admission.close()
    assert results.count(True) == 50 and results.count(False) == 50
    assert await balance(ledger, ledger.user_id) == (0, 0)
    assert await usage_rows(ledger, FUNDED_BY_CREDIT) == 50, "a refused call leaves no usage row behind"


async def test_retries_in_one_batch_and_across_batches_are_paid_once(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id)
    admission, entitlements = admission_for(ledger)
    await entitlements.plans_of(ledger.user_id)
    try:
        first = await admit_all(admission, calls_of(ledger.user_id, ["a", "a", "b", "a", "b"]))
        again = await admit_all(admission, calls_of(ledger.user_id, ["a", "b", "c"]))
    finally:
        admission.close()
    assert first == [True] * 5 and again == [True] * 3
    assert await balance(ledger, ledger.user_id) == (47, 47)


async def test_a_failing_call_in_a_batch_spends_no_one_elses_credit(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id)
    admission, entitlements = admission_for(ledger)
    await entitlements.plans_of(ledger.user_id)
    await entitlements.plans_of("usr_gone")
    # A user deleted meanwhile: on SQLite its usage row breaks the foreign key, and with it the
    # batch's transaction.
    calls = calls_of(ledger.user_id, [f"call-{n}" for n in range(5)])
    calls.insert(2, PaidCall(user_id="usr_gone", tool=TOOL, call_key="orphan"))
    try:
        results = await admit_all(admission, calls)
    finally:
        admission.close()
    if ledger.engine.url.get_backend_name() == "sqlite":
        assert isinstance(results[2], Exception), results
    else:  # each call its own statement: the gone user's finds no balance to spend
        assert results[2] is False, results
    assert results[:2] + results[3:] == [True] * 5
    assert await balance(ledger, ledger.user_id) == (45, 45)
    assert await usage_rows(ledger, FUNDED_BY_CREDIT) == 5


async def test_two_replicas_pay_each_call_once(ledger: Ledger) -> None:
    await grant(ledger, ledger.user_id)
    url = ledger.engine.url.render_as_string(hide_password=False)
    other_engine = create_engine(url)
    try:
        async with AsyncExitStack() as stack:
            decisions = None
            if ledger.decisions is not None:  # the other replica's own connections
                decisions = await stack.enter_async_context(PostgresDecisions.open(url))
            other = Ledger(other_engine, create_session_factory(other_engine), ledger.user_id, decisions)
            first, first_entitlements = admission_for(ledger)
            second, second_entitlements = admission_for(other)
            stack.callback(first.close)
            stack.callback(second.close)
            await first_entitlements.plans_of(ledger.user_id)
            await second_entitlements.plans_of(ledger.user_id)
            keys = [f"call-{n}" for n in range(30)]
            results = await asyncio.gather(
                admit_all(first, calls_of(ledger.user_id, keys)),
                admit_all(second, calls_of(ledger.user_id, keys)),
            )
    finally:
        await other_engine.dispose()
    assert list(results) == [[True] * 30, [True] * 30]
    assert await balance(ledger, ledger.user_id) == (20, 20)
    assert await usage_rows(ledger, FUNDED_BY_CREDIT) == 30


async def test_parallel_calls_use_exactly_the_included_calls_then_credits(ledger: Ledger) -> None:
    subscription = await ledger.subscribe(PRO.id)
    await grant(ledger, ledger.user_id)
    admission, entitlements = admission_for(ledger)
    assert await entitlements.plans_of(ledger.user_id) == {PRO.id}
    try:
        results = await admit_all(admission, calls_of(ledger.user_id, [f"call-{n}" for n in range(20)]))
    finally:
        admission.close()
    assert results == [True] * 20
    async with ledger.sessions() as session:
        assert await included_used(session, subscription) == 5
    assert await balance(ledger, ledger.user_id) == (35, 35), "past the quota, credits pay"


async def test_pay_as_you_go_calls_are_metered_once_each(ledger: Ledger) -> None:
    await ledger.subscribe(PAYG.id)
    admission, entitlements = admission_for(ledger)
    assert await entitlements.plans_of(ledger.user_id) == {PAYG.id}
    try:
        results = await admit_all(admission, calls_of(ledger.user_id, ["a", "b", "a", "c", "b"]))
    finally:
        admission.close()
    assert results == [True] * 5
    async with ledger.sessions() as session:
        metered = (
            await session.exec(select(UsageRecord).where(col(UsageRecord.funding) == FUNDED_BY_METER))
        ).all()
    assert sorted(row.call_key for row in metered) == ["a", "b", "c"]
    assert {(row.customer_id, row.event_name, row.unit_amount) for row in metered} == {
        ("cus_1", "sql_explain_calls", 2)
    }
    assert all(row.next_report_at is not None and row.reported_at is None for row in metered)


async def test_past_the_included_calls_each_call_is_metered_once(ledger: Ledger) -> None:
    subscription = await ledger.subscribe(TEAM.id)
    admission, entitlements = admission_for(ledger)
    assert await entitlements.plans_of(ledger.user_id) == {TEAM.id}
    keys = [f"call-{n}" for n in range(8)]
    try:
        results = await admit_all(admission, calls_of(ledger.user_id, keys + keys[:4]))
    finally:
        admission.close()
    assert results == [True] * 12, "retries pass too"
    async with ledger.sessions() as session:
        assert await included_used(session, subscription) == 3
        rows = (await session.exec(select(UsageRecord))).all()
    assert sorted(row.call_key for row in rows) == sorted(keys), "one row per call"
    metered = [row for row in rows if row.funding == FUNDED_BY_METER]
    assert len(metered) == 5
    assert {(row.customer_id, row.event_name, row.unit_amount, row.currency) for row in metered} == {
        ("cus_1", "sql_explain_calls", 2, "usd")
    }
    assert all(row.next_report_at is not None for row in metered)


async def test_with_the_write_lock_held_elsewhere_calls_wait_through_the_pool(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    if ledger.engine.url.get_backend_name() != "sqlite":
        pytest.skip("SQLite's write lock")
    await grant(ledger, ledger.user_id)
    admission, entitlements = admission_for(ledger)
    await entitlements.plans_of(ledger.user_id)
    holder = sqlite3.connect(str(make_url(str(ledger.engine.url)).database), isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with caplog.at_level(logging.INFO, logger="service.paywall.admission"):
            waiting = asyncio.create_task(
                admission.admit(PaidCall(ledger.user_id, TOOL, "call-1"), UNLOCKING)
            )

            async def fell_back() -> bool:
                return any("write lock held elsewhere" in record.getMessage() for record in caplog.records)

            await until(fell_back, "the decision meets the lock and takes the pool's path")
            assert not waiting.done()
            holder.execute("ROLLBACK")
            assert (await waiting).allowed
    finally:
        holder.close()
        admission.close()
    assert await balance(ledger, ledger.user_id) == (49, 49)


async def test_a_renewal_counts_in_the_new_period_though_the_cache_holds_the_old_one(ledger: Ledger) -> None:
    """The cached subscription spares a read only while its period runs: once it has ended, the
    decision reads the renewed period (applied on another replica, no bus message here)."""
    subscription = await ledger.subscribe(PRO.id)
    async with ledger.sessions() as session, session.begin():
        row = await session.get(Subscription, subscription.id)
        assert row is not None
        row.current_period_end = utcnow() - timedelta(minutes=1)
    admission, entitlements = admission_for(ledger)
    assert await entitlements.plans_of(ledger.user_id) == {PRO.id}
    try:
        ended = await admit_all(admission, calls_of(ledger.user_id, [f"old-{n}" for n in range(6)]))
        assert (ended.count(True), ended.count(False)) == (5, 1), "the included calls, then blocked"
        async with ledger.sessions() as session, session.begin():
            row = await session.get(Subscription, subscription.id)
            assert row is not None
            row.current_period_end = utcnow() + timedelta(days=30)
        renewed = await admit_all(admission, calls_of(ledger.user_id, ["new-1"]))
    finally:
        admission.close()
    assert renewed == [True]


async def test_an_entitlement_change_drops_the_cached_subscription(ledger: Ledger) -> None:
    subscription = await ledger.subscribe(PRO.id)
    admission, entitlements = admission_for(ledger)
    assert await entitlements.plans_of(ledger.user_id) == {PRO.id}
    try:
        used_up = await admit_all(admission, calls_of(ledger.user_id, [f"a-{n}" for n in range(6)]))
        assert (used_up.count(True), used_up.count(False)) == (5, 1), "the included calls, then blocked"
        async with ledger.sessions() as session, session.begin():
            row = await session.get(Subscription, subscription.id)
            assert row is not None
            row.current_period_end = utcnow() + timedelta(days=60)
        await entitlements.on_change(EntitlementChanged(user_id=ledger.user_id))
        assert await admit_all(admission, calls_of(ledger.user_id, ["b-1"])) == [True]
    finally:
        admission.close()


async def test_a_batch_the_write_lock_stops_partway_keeps_what_it_decided(ledger: Ledger) -> None:
    """Another process takes SQLite's write lock after some calls of a batch were decided one by
    one: those stand as decided (deciding them again would take them for their own retries), and
    only the rest answer `Busy`, for the caller to decide through the pool."""
    if ledger.engine.url.get_backend_name() != "sqlite":
        pytest.skip("SQLite's write lock")
    await grant(ledger, ledger.user_id)
    path = make_url(str(ledger.engine.url)).database
    assert path is not None
    blocker = sqlite3.connect(path, isolation_level=None, timeout=0)
    begun = 0

    def lock_at_the_fourth_transaction(statement: str) -> None:
        nonlocal begun
        if statement == "BEGIN IMMEDIATE":
            begun += 1
            if begun == 4:  # the batch's, then the first two calls alone: the third finds it taken
                blocker.execute("BEGIN IMMEDIATE")

    def connect() -> sqlite3.Connection:
        connection = open_sqlite_connection(ledger.engine)
        connection.set_trace_callback(lock_at_the_fourth_transaction)
        return connection

    decisions = SqliteDecisions(connect, CATALOG.get, CATALOG.metered_price, grace=timedelta(days=3))
    calls = calls_of(ledger.user_id, ["first", "second"])
    calls.insert(1, PaidCall(user_id="usr_gone", tool=TOOL, call_key="orphan"))  # fails the batch
    try:
        first, orphan, second = decisions.decide([SqliteAttempt(call, ()) for call in calls])
    finally:
        decisions.close()
        blocker.execute("ROLLBACK")
        blocker.close()
    assert isinstance(first, Decision) and first.allowed and first.usage_id is not None
    assert isinstance(orphan, Exception) and not isinstance(orphan, Busy)
    assert isinstance(second, Busy)
    assert await balance(ledger, ledger.user_id) == (PACK.credits - 1, PACK.credits - 1)


async def test_a_call_failing_after_its_purchase_was_taken_back_gets_no_credit_back(ledger: Ledger) -> None:
    """The refund counted the running call's credit as spent: giving it back when the call then
    fails would leave the user a credit of a purchase taken back."""
    async with ledger.sessions() as session, session.begin():
        await grant_credits(session, ledger.user_id, PACK, source="checkout:cs_1", payment_intent_id="pi_1")
    admission, _ = admission_for(ledger)
    try:
        running, failing = calls_of(ledger.user_id, ["running", "failing"])
        before = await admission.admit(failing, UNLOCKING)
        assert before.usage_id is not None
        await admission.release(ledger.user_id, before.usage_id)  # failed before any refund: given back
        verdict = await admission.admit(running, UNLOCKING)
        assert verdict.allowed and verdict.usage_id is not None
        async with ledger.sessions() as session, session.begin():
            assert await take_back_purchase(session, "pi_1") == (ledger.user_id, PACK.credits - 1)
        await admission.release(ledger.user_id, verdict.usage_id)  # the call then fails
    finally:
        admission.close()
    assert await balance(ledger, ledger.user_id) == (0, 0)
