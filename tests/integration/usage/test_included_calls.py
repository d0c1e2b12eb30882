"""Included calls per period: counted once per call, exactly up to the quota, then blocked or metered."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from service.billing.models import StripeCustomer, Subscription
from service.billing.plans import MeteredPrice, Plan
from service.billing.usage import (
    FUNDED_BY_METER,
    FUNDED_BY_PLAN,
    Decision,
    PaidCall,
    Refused,
    included_used,
    record_plan_call,
)
from service.db.metadata import utcnow
from tests.integration.usage.conftest import Ledger

METERED = MeteredPrice(
    tool="sql_explain", lookup_key="m", event_name="sql_explain_calls", unit_amount=2, currency="usd"
)


def plan(included: int, overage: str) -> Plan:
    return Plan(
        id="pro",
        name="Pro",
        lookup_key="pro",
        amount=900,
        currency="usd",
        interval="month",
        tools=("sql_explain",),
        included_calls=included,
        overage=overage,
    )


async def subscription(ledger: Ledger, period_end_days: int = 30) -> Subscription:
    row = Subscription(
        id="sub_1",
        user_id=ledger.user_id,
        customer_id="cus_1",
        plan_id="pro",
        status="active",
        current_period_end=utcnow() + timedelta(days=period_end_days),
    )
    async with ledger.sessions() as session, session.begin():
        session.add(StripeCustomer(user_id=ledger.user_id, customer_id="cus_1"))
        session.add(row)
    return row


async def call(ledger: Ledger, sub: Subscription, pro: Plan, key: str) -> Decision:
    try:
        async with ledger.sessions() as session, session.begin():
            return await record_plan_call(
                session, PaidCall(user_id=ledger.user_id, tool="sql_explain", call_key=key), sub, pro, METERED
            )
    except Refused:
        return Decision(allowed=False)


async def test_parallel_calls_use_exactly_the_included_calls(ledger: Ledger) -> None:
    sub = await subscription(ledger)
    pro = plan(5, "block")
    decisions = await asyncio.gather(*(call(ledger, sub, pro, f"call-{n}") for n in range(20)))
    assert [d.allowed for d in decisions].count(True) == 5
    async with ledger.sessions() as session:
        assert await included_used(session, sub) == 5


async def test_a_retry_is_counted_once(ledger: Ledger) -> None:
    sub = await subscription(ledger)
    pro = plan(5, "block")
    decisions = await asyncio.gather(*(call(ledger, sub, pro, "same") for _ in range(5)))
    assert all(d.allowed for d in decisions)
    assert sum(d.funding == FUNDED_BY_PLAN for d in decisions) == 1
    async with ledger.sessions() as session:
        assert await included_used(session, sub) == 1


async def test_past_the_quota_overage_meter_bills_each_call(ledger: Ledger) -> None:
    sub = await subscription(ledger)
    pro = plan(2, "meter")
    fundings = [(await call(ledger, sub, pro, f"call-{n}")).funding for n in range(4)]
    assert fundings == [FUNDED_BY_PLAN, FUNDED_BY_PLAN, FUNDED_BY_METER, FUNDED_BY_METER]


async def test_a_new_period_starts_from_zero(ledger: Ledger) -> None:
    sub = await subscription(ledger)
    pro = plan(1, "block")
    assert (await call(ledger, sub, pro, "a")).allowed
    assert not (await call(ledger, sub, pro, "b")).allowed
    renewed = sub.model_copy(update={"current_period_end": sub.current_period_end + timedelta(days=30)})  # type: ignore[operator]
    assert (await call(ledger, renewed, pro, "b")).allowed
