"""CoalescedReads: an event shares a read only if the read started after the event arrived."""

from __future__ import annotations

import asyncio

import pytest

from service.billing.stripe_sync.fresh_reads import CoalescedReads


class Stripe:
    """A reader whose reads are held until released, answering the object's version at read start."""

    def __init__(self) -> None:
        self.version = 0
        self.started: list[str] = []
        self.gates: list[asyncio.Event] = []
        self.fail_next = False
        self.changed = asyncio.Event()

    async def read(self, key: str) -> str:
        version = self.version
        self.started.append(key)
        self.changed.set()
        gate = asyncio.Event()
        self.gates.append(gate)
        failing, self.fail_next = self.fail_next, False
        await gate.wait()
        if failing:
            raise ConnectionError("Stripe unreachable")
        return f"{key}@{version}"

    async def until_started(self, count: int) -> None:
        while len(self.started) < count:
            self.changed.clear()
            await self.changed.wait()


async def test_arrivals_during_a_read_share_the_next_one_which_starts_after_them() -> None:
    stripe = Stripe()
    reads = CoalescedReads(stripe.read)
    first = asyncio.create_task(reads.read("sub_1"))
    await stripe.until_started(1)
    stripe.version = 1  # the object changes; the events below are about that change
    later = [asyncio.create_task(reads.read("sub_1")) for _ in range(3)]
    await asyncio.sleep(0)
    assert len(stripe.started) == 1  # nobody joins a read that began before they arrived
    stripe.gates[0].set()
    assert await first == "sub_1@0"
    await stripe.until_started(2)
    stripe.gates[1].set()
    assert [await task for task in later] == ["sub_1@1"] * 3
    assert stripe.started == ["sub_1", "sub_1"]


async def test_objects_are_read_independently() -> None:
    stripe = Stripe()
    reads = CoalescedReads(stripe.read)
    tasks = [asyncio.create_task(reads.read(key)) for key in ("sub_1", "sub_2")]
    await stripe.until_started(2)
    for gate in stripe.gates:
        gate.set()
    assert [await task for task in tasks] == ["sub_1@0", "sub_2@0"]


async def test_a_failed_read_fails_its_callers_and_the_next_read_goes_ahead() -> None:
    stripe = Stripe()
    reads = CoalescedReads(stripe.read)
    stripe.fail_next = True
    failing = asyncio.create_task(reads.read("sub_1"))
    await stripe.until_started(1)
    waiting = asyncio.create_task(reads.read("sub_1"))
    await asyncio.sleep(0)
    stripe.gates[0].set()
    with pytest.raises(ConnectionError):
        await failing
    await stripe.until_started(2)
    stripe.gates[1].set()
    assert await waiting == "sub_1@0"
    assert reads.in_flight == 0


async def test_a_caller_that_gives_up_does_not_cancel_the_read_others_share() -> None:
    stripe = Stripe()
    reads = CoalescedReads(stripe.read)
    first = asyncio.create_task(reads.read("sub_1"))
    await stripe.until_started(1)
    quitter = asyncio.create_task(reads.read("sub_1"))
    stayer = asyncio.create_task(reads.read("sub_1"))
    await asyncio.sleep(0)
    quitter.cancel()
    stripe.gates[0].set()
    assert await first == "sub_1@0"
    await stripe.until_started(2)
    stripe.gates[1].set()
    assert await stayer == "sub_1@0"
    assert quitter.cancelled()
    assert stripe.started == ["sub_1", "sub_1"]
