"""The completion bus: how the webhook path tells every interested party that money landed.

Billing publishes `EntitlementChanged` on its own event hub; `relay_billing_events` subscribes the
bus to it at wiring time, so billing never imports the paywall.

Listeners: the entitlement cache, retries and `elicitation/create` calls waiting for a payment, and
the notifier that owes legacy sessions their `notifications/elicitation/complete`. It also carries a
second, smaller message: the id of a revoked OAuth grant, for every replica's token cache. This
in-process bus serves one process; a multi-replica bus keeps the same interface.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from service.billing.events import BillingEvents, EntitlementChanged

logger = logging.getLogger(__name__)


Listener = Callable[[EntitlementChanged], Awaitable[None]]
RevocationListener = Callable[[str], Awaitable[None]]  # called with a revoked grant's id


class CompletionBus(Protocol):
    def subscribe(self, listener: Listener) -> None: ...

    async def publish(self, event: EntitlementChanged) -> None: ...


@dataclass
class InProcessBus:
    _listeners: list[Listener] = field(default_factory=list)
    _revocation_listeners: list[RevocationListener] = field(default_factory=list)

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def subscribe_revocations(self, listener: RevocationListener) -> None:
        self._revocation_listeners.append(listener)

    async def publish_revocation(self, grant_id: str) -> None:
        results = await asyncio.gather(
            *(listener(grant_id) for listener in self._revocation_listeners), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                logger.error("revocation listener failed", exc_info=result)

    async def publish(self, event: EntitlementChanged) -> None:
        """Runs every listener; one failing listener does not starve the others."""
        results = await asyncio.gather(
            *(listener(event) for listener in self._listeners), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                logger.error("completion listener failed", exc_info=result)


def relay_billing_events(events: BillingEvents, bus: CompletionBus) -> None:
    """Billing's entitlement changes reach this process's listeners and, through the bus, every replica's."""
    events.subscribe(EntitlementChanged, bus.publish)


class PaymentWaiters:
    """Lets a request wait, bounded, for the calling user's entitlement to change.

    A whole wait first takes one of the user's `max_per_user` places (`place`): each wait polls the
    database, and a sealed 2026-07-28 request state can be replayed at will. Within it, register
    first (`watch`), then check, then wait: a change that lands between the check and the wait still
    wakes the waiter.
    """

    def __init__(self, *, max_per_user: int) -> None:
        self._max_per_user = max_per_user
        self._places: dict[str, int] = {}  # user id -> waits under way
        self._waiting: dict[str, set[asyncio.Event]] = {}

    @contextmanager
    def place(self, user_id: str) -> Iterator[bool]:
        """Holds one of the user's places to wait while the block runs; False when all are taken
        (nothing is held then)."""
        held = self._places.get(user_id, 0)
        if held >= self._max_per_user:
            yield False
            return
        self._places[user_id] = held + 1
        try:
            yield True
        finally:
            left = self._places[user_id] - 1
            if left:
                self._places[user_id] = left
            else:
                del self._places[user_id]

    @contextmanager
    def watch(self, user_id: str) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._waiting.setdefault(user_id, set()).add(event)
        try:
            yield event
        finally:
            events = self._waiting.get(user_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiting[user_id]

    async def on_change(self, change: EntitlementChanged) -> None:
        for event in self._waiting.get(change.user_id, ()):
            event.set()


async def wait_for(event: asyncio.Event, seconds: float) -> bool:
    """True if `event` was set within `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True
