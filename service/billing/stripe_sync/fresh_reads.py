"""Re-reads of one Stripe object shared by every event that needs it, never older than any of them.

Every event about a subscription makes the webhook path read the subscription back from Stripe.
A burst of events about one subscription (a checkout sends half a dozen) would otherwise cost a
read each, and Stripe rate-limits reads per account. An event may share a read only if the read
started after the event arrived, so at most two reads per object are outstanding: the one running,
and the next one, which every event arriving meanwhile joins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Value = TypeVar("Value")


@dataclass
class _Slot(Generic[Value]):
    running: asyncio.Task[Value] | None = None
    next: asyncio.Future[Value] | None = None
    users: int = field(default=0)


class CoalescedReads(Generic[Value]):
    def __init__(self, read: Callable[[str], Awaitable[Value]]) -> None:
        self._read = read
        self._slots: dict[str, _Slot[Value]] = {}

    @property
    def in_flight(self) -> int:
        return sum(1 for slot in self._slots.values() if slot.running is not None)

    async def read(self, key: str) -> Value:
        slot = self._slots.setdefault(key, _Slot())
        if slot.running is None:
            shared: asyncio.Future[Value] = self._start(key, slot)
        else:
            if slot.next is None:
                slot.next = asyncio.get_running_loop().create_future()
            shared = slot.next
        slot.users += 1
        try:
            # Shielded: a caller that gives up must not cancel a read others are waiting for.
            return await asyncio.shield(shared)
        finally:
            slot.users -= 1
            self._forget_if_idle(key, slot)

    def _start(self, key: str, slot: _Slot[Value]) -> asyncio.Task[Value]:
        task = asyncio.ensure_future(self._read(key))
        slot.running = task
        task.add_done_callback(lambda done: self._finished(key, slot, done))
        return task

    def _finished(self, key: str, slot: _Slot[Value], done: asyncio.Task[Value]) -> None:
        if not done.cancelled():
            done.exception()  # retrieved here: every waiter may have given up
        slot.running = None
        waiting, slot.next = slot.next, None
        if waiting is not None:
            task = self._start(key, slot)
            task.add_done_callback(lambda done: _settle(waiting, done))
        self._forget_if_idle(key, slot)

    def _forget_if_idle(self, key: str, slot: _Slot[Value]) -> None:
        if slot.running is None and slot.next is None and slot.users == 0 and self._slots.get(key) is slot:
            del self._slots[key]


def _settle(target: asyncio.Future[Value], done: asyncio.Task[Value]) -> None:
    if target.done():
        return
    if done.cancelled():
        target.cancel()
    elif (error := done.exception()) is not None:
        target.set_exception(error)
    else:
        target.set_result(done.result())
