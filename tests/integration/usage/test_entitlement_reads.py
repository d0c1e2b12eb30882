"""The entitlement cache: callers that miss it share one database read per user."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event

from service.billing.events import EntitlementChanged
from service.db.engine import create_engine, create_session_factory
from service.paywall.entitlements import Entitlements
from tests.integration.usage.conftest import Ledger
from tests.support.polling import until


class SubscriptionReads:
    """Counts the statements that read the subscription table."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, _conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if "FROM subscription" in statement:
            self.count += 1


@pytest.fixture
def reads(ledger: Ledger) -> Iterator[SubscriptionReads]:
    counter = SubscriptionReads()
    event.listen(ledger.engine.sync_engine, "before_cursor_execute", counter)
    yield counter
    event.remove(ledger.engine.sync_engine, "before_cursor_execute", counter)


def entitlements_of(ledger: Ledger) -> Entitlements:
    return Entitlements(ledger.sessions, grace=timedelta(days=3), cache_seconds=60.0)


def sqlite_only(ledger: Ledger) -> None:
    if ledger.engine.url.get_backend_name() != "sqlite":
        pytest.skip("holds SQLite's one pooled connection to keep a read in flight")


async def test_sixteen_callers_missing_the_cache_share_one_read(
    ledger: Ledger, reads: SubscriptionReads
) -> None:
    await ledger.subscribe("pro")
    entitlements = entitlements_of(ledger)
    answers = await asyncio.gather(*(entitlements.plans_of(ledger.user_id) for _ in range(16)))
    assert answers == [frozenset({"pro"})] * 16
    assert reads.count == 1
    assert await entitlements.plans_of(ledger.user_id) == {"pro"}
    assert reads.count == 1, "the answer was cached"


async def test_fresh_callers_each_read_the_database(ledger: Ledger, reads: SubscriptionReads) -> None:
    await ledger.subscribe("pro")
    entitlements = entitlements_of(ledger)
    answers = await asyncio.gather(*(entitlements.plans_of(ledger.user_id, fresh=True) for _ in range(3)))
    assert answers == [frozenset({"pro"})] * 3
    assert reads.count == 3


async def test_a_change_during_a_read_keeps_that_read_out_of_the_cache(
    ledger: Ledger, reads: SubscriptionReads
) -> None:
    sqlite_only(ledger)
    entitlements = entitlements_of(ledger)
    async with ledger.engine.connect():  # the read waits for the pool's one connection
        reading = asyncio.ensure_future(entitlements.plans_of(ledger.user_id))
        await subscribe_elsewhere(ledger)
        await entitlements.on_change(EntitlementChanged(ledger.user_id, ("pro",), ()))
        assert not reading.done()
    await reading  # read before or after the subscription: either way not kept
    assert await entitlements.plans_of(ledger.user_id) == {"pro"}
    assert reads.count == 2, "the second call read again"


async def subscribe_elsewhere(ledger: Ledger) -> None:
    """The subscription written by another replica, through an engine (and connection) of its own."""
    engine = create_engine(ledger.engine.url.render_as_string(hide_password=False))
    try:
        await Ledger(engine, create_session_factory(engine), ledger.user_id).subscribe("pro")
    finally:
        await engine.dispose()


async def test_a_caller_that_gives_up_leaves_the_shared_read_to_the_others(ledger: Ledger) -> None:
    sqlite_only(ledger)
    await ledger.subscribe("pro")
    entitlements = entitlements_of(ledger)
    async with ledger.engine.connect():
        first = asyncio.ensure_future(entitlements.plans_of(ledger.user_id))
        second = asyncio.ensure_future(entitlements.plans_of(ledger.user_id))

        async def both_waiting() -> bool:
            return not first.done() and not second.done()

        await until(both_waiting, "both callers waiting for the read")
        first.cancel()
    assert await second == {"pro"}
    assert first.cancelled()
