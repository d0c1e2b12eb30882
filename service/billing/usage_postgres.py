"""Paid-call decisions on PostgreSQL, each one statement on a driver connection in autocommit.

Through an ORM session a credit spend is five round trips (BEGIN, the usage row, the balance, the
ledger entry, COMMIT) and SQLAlchemy's statement machinery around each. Here a credit spend and a
pay-as-you-go call are one statement each (a refused spend a second, `_RECORDED`), sent in
autocommit through the driver (psycopg), so the database applies all of it or none; a plan's
included call is one statement and its COMMIT (a second statement when the call is metered past
them, a ROLLBACK when it is refused) (ADR 10). The connections are a few of their own
(`service.db.autocommit_pool`), not the engine's.

The rows are those of `service.billing.usage`: the call's usage row (unique per user and call key)
and the balance and ledger entry it moves commit together or not at all, and a retried call finds
its row and passes without paying again. A change to what is written there must be made here too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import errors

from service.billing.models import Subscription
from service.billing.plans import MeteredPrice, Plan
from service.billing.usage import (
    FUNDED_BY_CREDIT,
    FUNDED_BY_METER,
    FUNDED_BY_PLAN,
    REFUSED,
    RETRIED,
    Decision,
    PaidCall,
    Refused,
    new_usage_id,
    period_of,
    plan_call_columns,
)
from service.db.autocommit_pool import AutocommitPool, autocommit_pool
from service.db.engine import SessionLimits
from service.db.metadata import utcnow

# The balance moves only when the call has no usage row yet, and the row is written only when the
# balance moved. Two deliveries of one call at the same moment both see no row and queue on the
# balance row's lock; the second then finds the row taken (ON CONFLICT DO NOTHING), and its ledger
# entry, which must name the usage row it paid for, gets a NULL source: the NOT NULL constraint
# fails the whole statement, spend included (`_RETRY_IN_FLIGHT`). A balance a concurrent spend has
# emptied meanwhile fails `balance >= 1` when the waiting UPDATE re-reads the row.
_SPEND = """
WITH spend AS (
    UPDATE credit_balance SET balance = balance - 1, updated_at = %(now)s
    WHERE user_id = %(user_id)s AND balance >= 1
      AND NOT EXISTS (SELECT 1 FROM usage_record WHERE user_id = %(user_id)s AND call_key = %(call_key)s)
    RETURNING user_id
), claim AS (
    INSERT INTO usage_record (id, user_id, call_key, tool, funding, created_at, report_attempts)
    SELECT %(id)s, user_id, %(call_key)s, %(tool)s, %(funding)s, %(now)s, 0 FROM spend
    ON CONFLICT (user_id, call_key) DO NOTHING
    RETURNING id
), entry AS (
    INSERT INTO credit_entry (user_id, delta, reason, source, created_at)
    SELECT user_id, -1, 'spend', (SELECT 'usage:' || id FROM claim), %(now)s FROM spend
)
SELECT EXISTS (SELECT 1 FROM spend),
       EXISTS (SELECT 1 FROM usage_record WHERE user_id = %(user_id)s AND call_key = %(call_key)s)
"""
_RETRY_IN_FLIGHT = "source"  # the column whose NOT NULL violation means a duplicate paid first
# The statement's own look at the usage row sees the snapshot it started with: a duplicate that
# waited on the balance row behind the first delivery, and then found the balance emptied by it,
# does not see the row the first one committed. A refusal looks again in a statement of its own.
_RECORDED = """
SELECT EXISTS (SELECT 1 FROM usage_record WHERE user_id = %(user_id)s AND call_key = %(call_key)s)
"""

# A metered call writes its usage row and nothing else: a retry's insert does nothing.
_METER = """
INSERT INTO usage_record (id, user_id, call_key, tool, funding, plan_id, subscription_id, period,
                          customer_id, event_name, unit_amount, currency, created_at, report_attempts,
                          next_report_at)
VALUES (%(id)s, %(user_id)s, %(call_key)s, %(tool)s, %(funding)s, %(plan_id)s, %(subscription_id)s,
        %(period)s, %(customer_id)s, %(event_name)s, %(unit_amount)s, %(currency)s, %(now)s, 0,
        %(next_report_at)s)
ON CONFLICT (user_id, call_key) DO NOTHING
RETURNING id
"""
_METER_COLUMNS = (
    "plan_id", "subscription_id", "period", "customer_id", "event_name", "unit_amount", "currency",
    "next_report_at",
)  # fmt: skip


# A plan's included call: the usage row first, and the counter raised only for a row written now, so
# a duplicate in flight waits for the first's row and raises nothing. Past the included calls the
# counter is left as it is and the caller meters the row (`_TO_METER`) or rolls the row back.
_COUNT = """
WITH claim AS (
    INSERT INTO usage_record (id, user_id, call_key, tool, funding, plan_id, subscription_id, period,
                              created_at, report_attempts)
    VALUES (%(id)s, %(user_id)s, %(call_key)s, %(tool)s, %(funding)s, %(plan_id)s,
            %(subscription_id)s, %(period)s, %(now)s, 0)
    ON CONFLICT (user_id, call_key) DO NOTHING
    RETURNING id
), counted AS (
    INSERT INTO usage_counter (subscription_id, period, user_id, used)
    SELECT %(subscription_id)s, %(period)s, %(user_id)s, 1 FROM claim
    ON CONFLICT (subscription_id, period) DO UPDATE SET used = usage_counter.used + 1
    WHERE usage_counter.used < %(included)s
    RETURNING used
)
SELECT EXISTS (SELECT 1 FROM claim), EXISTS (SELECT 1 FROM counted)
"""
_TO_METER = """
UPDATE usage_record SET funding = %(funding)s, customer_id = %(customer_id)s,
    event_name = %(event_name)s, unit_amount = %(unit_amount)s, currency = %(currency)s,
    next_report_at = %(next_report_at)s
WHERE id = %(id)s
"""
_BILLING_COLUMNS = ("customer_id", "event_name", "unit_amount", "currency", "next_report_at")


def _call_parameters(call: PaidCall, funding: str) -> dict[str, Any]:
    return {
        "id": new_usage_id(),
        "user_id": call.user_id,
        "call_key": call.call_key,
        "tool": call.tool,
        "funding": funding,
        "now": utcnow(),
    }


# Decisions in flight at once, each on a connection of its own: a statement is one short round trip,
# so more would not decide faster. The decisions' connections, kept open between calls, number as
# many.
CONCURRENT_DECISIONS = 4


class PostgresDecisions:
    """Paid-call decisions on PostgreSQL's driver connections (see the module docstring)."""

    def __init__(self, pool: AutocommitPool, *, concurrent: int = CONCURRENT_DECISIONS) -> None:
        self._pool = pool
        self._slots = asyncio.Semaphore(concurrent)
        self.waiting = 0  # decisions waiting for one of the places
        self.deciding = 0  # decisions holding one

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        database_url: str,
        *,
        limits: SessionLimits = SessionLimits(),  # noqa: B008 - frozen, so one shared default is safe
        concurrent: int = CONCURRENT_DECISIONS,
    ) -> AsyncIterator[PostgresDecisions]:
        """Decisions on up to `concurrent` connections to `database_url`, closed when the block ends."""
        async with autocommit_pool(
            database_url, size=concurrent, name="paid-call-decisions", limits=limits
        ) as pool:
            yield cls(pool, concurrent=concurrent)

    @asynccontextmanager
    async def place(self) -> AsyncIterator[None]:
        """One of the `concurrent` places, held while a decision has a connection: one that runs
        elsewhere (through the ORM, for a subscription the entitlement cache does not hold) takes
        one too."""
        self.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
        self.deciding += 1
        try:
            yield
        finally:
            self.deciding -= 1
            self._slots.release()

    @asynccontextmanager
    async def _autocommit(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """One of the decisions' connections, in autocommit."""
        async with self.place(), self._pool.connection() as connection:
            yield connection

    async def spend_credit(self, call: PaidCall) -> Decision:
        """Pay for `call` with one of the user's credits: paid now, `RETRIED` when paid before,
        `REFUSED` when the user has no credit (nothing written)."""
        async with self._autocommit() as driver:
            try:
                return await self._spend(driver, call)
            except errors.NotNullViolation as exc:
                if exc.diag.column_name != _RETRY_IN_FLIGHT:
                    raise
            # A duplicate of this call paid first and has committed: now its row is seen.
            return await self._spend(driver, call)

    @staticmethod
    async def _spend(driver: psycopg.AsyncConnection[Any], call: PaidCall) -> Decision:
        parameters = _call_parameters(call, FUNDED_BY_CREDIT)
        cursor = await driver.execute(_SPEND, parameters)
        row = await cursor.fetchone()
        assert row is not None, "the statement answers one row"
        spent, recorded_before = bool(row[0]), bool(row[1])
        if spent:
            return Decision(allowed=True, funding=FUNDED_BY_CREDIT, usage_id=parameters["id"])
        if recorded_before:
            return RETRIED
        # Refused: a duplicate of this call may have paid while the statement waited (`_RECORDED`).
        cursor = await driver.execute(_RECORDED, {"user_id": call.user_id, "call_key": call.call_key})
        row = await cursor.fetchone()
        assert row is not None, "the statement answers one row"
        return RETRIED if row[0] else REFUSED

    async def plan_call(
        self, call: PaidCall, subscription: Subscription, plan: Plan, metered: MeteredPrice | None
    ) -> Decision:
        """Count (or meter) `call` under `subscription` to `plan`, a plan that counts calls, as
        `usage.record_plan_call` does; `Refused`, with nothing written, past a blocking quota."""
        assert plan.included_calls is not None, "only plans that count calls come here"
        values, billing = plan_call_columns(subscription, period_of(subscription), plan, metered)
        if plan.included_calls == 0:  # pay as you go: every call metered, nothing to count
            if not billing:
                raise Refused
            return await self.meter(call, {**values, **billing})
        decided = await self.count(call, values, plan.included_calls, billing)
        if not decided.allowed:
            raise Refused
        return decided

    async def count(
        self, call: PaidCall, plan_columns: Mapping[str, Any], included: int, billing: Mapping[str, Any]
    ) -> Decision:
        """Count `call` against a plan's `included` calls this period (`plan_columns`: the plan,
        subscription and period); past them, meter it when `billing` has the meter's columns.
        `REFUSED`, with nothing written, when the included calls are used up and nothing meters."""
        parameters = _call_parameters(call, FUNDED_BY_PLAN)
        parameters.update(plan_columns, included=included)
        async with self._autocommit() as driver:
            async with driver.transaction():
                cursor = await driver.execute(_COUNT, parameters)
                row = await cursor.fetchone()
                assert row is not None, "the statement answers one row"
                claimed, counted = bool(row[0]), bool(row[1])
                if not claimed:
                    return RETRIED  # a call decided before
                if counted:
                    return Decision(allowed=True, funding=FUNDED_BY_PLAN, usage_id=parameters["id"])
                if billing:
                    metering = {"id": parameters["id"], "funding": FUNDED_BY_METER}
                    metering.update((name, billing.get(name)) for name in _BILLING_COLUMNS)
                    await driver.execute(_TO_METER, metering)
                    return Decision(allowed=True, funding=FUNDED_BY_METER, usage_id=parameters["id"])
                raise psycopg.Rollback  # the usage row goes; the block ends without an error
            return REFUSED

    async def meter(self, call: PaidCall, columns: Mapping[str, Any]) -> Decision:
        """Record `call` as metered with the plan's and the meter's `columns` (a retry: nothing)."""
        parameters = _call_parameters(call, FUNDED_BY_METER)
        parameters.update((name, columns.get(name)) for name in _METER_COLUMNS)
        async with self._autocommit() as driver:
            cursor = await driver.execute(_METER, parameters)
            if await cursor.fetchone() is None:
                return RETRIED
        return Decision(allowed=True, funding=FUNDED_BY_METER, usage_id=parameters["id"])
