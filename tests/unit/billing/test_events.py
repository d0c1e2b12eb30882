"""Billing's event hub: every subscriber hears an event, and one that fails fails nobody else."""

from __future__ import annotations

import asyncio
import logging

import pytest

from service.billing.events import BillingEvents, EntitlementChanged


async def test_every_subscriber_hears_the_event_and_a_failing_one_is_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = BillingEvents()
    heard: list[tuple[str, EntitlementChanged]] = []
    both_running = asyncio.Barrier(2)

    async def first(event: EntitlementChanged) -> None:
        await both_running.wait()  # subscribers run side by side: this returns only if the other runs too
        heard.append(("first", event))

    async def failing(event: EntitlementChanged) -> None:
        raise RuntimeError("subscriber broke")

    async def second(event: EntitlementChanged) -> None:
        await both_running.wait()
        heard.append(("second", event))

    for subscriber in (first, failing, second):
        events.subscribe(EntitlementChanged, subscriber)
    change = EntitlementChanged("user-1", ("el_1",), (("el_1", "session-1"),))
    with caplog.at_level(logging.ERROR, logger="service.billing.events"):
        await asyncio.wait_for(events.publish(change), timeout=5)
    assert sorted(heard) == [("first", change), ("second", change)]
    [failure] = caplog.records
    assert "EntitlementChanged" in failure.getMessage()
    assert failure.exc_info is not None and str(failure.exc_info[1]) == "subscriber broke"


async def test_an_event_nobody_subscribed_to_goes_nowhere() -> None:
    await BillingEvents().publish(EntitlementChanged("user-1"))
