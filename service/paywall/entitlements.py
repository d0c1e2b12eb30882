"""Entitlement checks with an in-process cache, invalidated by the completion bus.

The cache keeps paid tool calls free of database round trips; its short lifetime bounds how long a
change made on another replica (or a grace period running out) can go unseen.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Literal

from service.billing.events import EntitlementChanged
from service.billing.models import Subscription
from service.billing.subscriptions import granting_subscriptions, grants_access
from service.db.engine import SessionFactory
from service.db.metadata import utcnow
from service.observability.metrics import ServiceMetrics

MAX_REMEMBERED_WITHOUT_CREDITS = 100_000


class Entitlements:
    def __init__(
        self,
        sessions: SessionFactory,
        *,
        grace: timedelta,
        cache_seconds: float,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self._sessions = sessions
        self._metrics = metrics
        self._grace = grace
        self._cache_seconds = cache_seconds
        # Per user: until when, the plans granted, and the subscriptions granting them (latest first).
        self._cache: dict[str, tuple[float, frozenset[str], tuple[Subscription, ...]]] = {}
        # Users seen without credits, until when: their unpaid calls skip the database the way
        # unentitled calls do. A purchase (on any replica) drops the entry through the bus.
        self._no_credits: dict[str, float] = {}

    @property
    def grace(self) -> timedelta:
        return self._grace

    def known_without_credits(self, user_id: str) -> bool:
        until = self._no_credits.get(user_id)
        if until is None:
            return False
        if until <= time.monotonic():
            del self._no_credits[user_id]
            return False
        return True

    def saw_without_credits(self, user_id: str) -> None:
        if len(self._no_credits) >= MAX_REMEMBERED_WITHOUT_CREDITS:
            self._no_credits.clear()  # forgetting only costs a database read per user
        self._no_credits[user_id] = time.monotonic() + self._cache_seconds

    async def plans_of(self, user_id: str, *, fresh: bool = False) -> frozenset[str]:
        now = time.monotonic()
        cached = self._cache.get(user_id)
        if cached is not None and not fresh and cached[0] > now:
            self._observe("cache", now)
            return cached[1]
        async with self._sessions() as session:
            granting = tuple(await granting_subscriptions(session, user_id, grace=self._grace))
        plans = frozenset(row.plan_id for row in granting)
        self._cache[user_id] = (now + self._cache_seconds, plans, granting)
        self._observe("database", now)
        return plans

    def cached_subscription(self, user_id: str, plan_ids: Iterable[str]) -> Subscription | None:
        """The latest cached subscription to one of `plan_ids` that still grants access and whose
        billing period has not ended; None when the cache has none (the caller reads the database)."""
        cached = self._cache.get(user_id)
        if cached is None or cached[0] <= time.monotonic():
            return None
        wanted = set(plan_ids)
        now = utcnow()
        for row in cached[2]:
            if row.plan_id not in wanted or not grants_access(row, grace=self._grace, now=now):
                continue
            if row.current_period_end is not None and row.current_period_end <= now:
                return None  # a renewal may be on its way: the database says which period
            return row
        return None

    def _observe(self, source: Literal["cache", "database"], started: float) -> None:
        if self._metrics is not None:
            self._metrics.entitlement_checked(source, time.monotonic() - started)

    async def allows(self, user_id: str, plan_ids: Iterable[str], *, fresh: bool = False) -> bool:
        return not (await self.plans_of(user_id, fresh=fresh)).isdisjoint(plan_ids)

    async def on_change(self, change: EntitlementChanged) -> None:
        self._cache.pop(change.user_id, None)
        self._no_credits.pop(change.user_id, None)
