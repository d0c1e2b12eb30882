"""Billing's domain events and the small hub that hands them to whoever subscribed at wiring time.

Billing publishes an event only after the transaction that caused it committed, and never learns
who listens: the paywall subscribes at wiring time (its completion bus carries each event to every
replica). A subscriber that fails is logged and does not fail the publisher or the other subscribers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EntitlementChanged:
    """A user's plans, credits or access changed: whatever is cached about them is stale.

    `completed_elicitation_ids`: the elicitations the same transaction completed (paid for);
    `sessions_owed`: (elicitation, MCP session) pairs it knew were owed a completion notice.
    """

    user_id: str
    completed_elicitation_ids: tuple[str, ...] = ()
    sessions_owed: tuple[tuple[str, str], ...] = ()


BillingEvent = EntitlementChanged  # the union of billing's event types, as more are added
Event = TypeVar("Event", bound=BillingEvent)


class BillingEvents:
    """Subscribers by event type; `publish` runs each subscriber of the event's type concurrently."""

    def __init__(self) -> None:
        self._subscribers: dict[type[Any], list[Callable[[Any], Awaitable[None]]]] = {}

    def subscribe(self, kind: type[Event], subscriber: Callable[[Event], Awaitable[None]]) -> None:
        self._subscribers.setdefault(kind, []).append(subscriber)

    async def publish(self, event: BillingEvent) -> None:
        subscribers = self._subscribers.get(type(event), ())
        results = await asyncio.gather(
            *(subscriber(event) for subscriber in subscribers), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                logger.error("a subscriber to %s failed", type(event).__name__, exc_info=result)
