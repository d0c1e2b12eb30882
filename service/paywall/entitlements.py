"""Entitlement checks with an in-process cache, invalidated by the completion bus.

The cache keeps paid tool calls free of database round trips; its short lifetime bounds how long a
change made on another replica (or a grace period running out) can go unseen.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import timedelta

from service.billing.subscriptions import entitled_plan_ids
from service.db.engine import SessionFactory
from service.observability.metrics import ServiceMetrics
from service.paywall.bus import EntitlementChanged


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
        self._cache: dict[str, tuple[float, frozenset[str]]] = {}

    async def plans_of(self, user_id: str, *, fresh: bool = False) -> frozenset[str]:
        now = time.monotonic()
        cached = self._cache.get(user_id)
        if cached is not None and not fresh and cached[0] > now:
            self._observe("cache", now)
            return cached[1]
        async with self._sessions() as session:
            plans = frozenset(await entitled_plan_ids(session, user_id, grace=self._grace))
        self._cache[user_id] = (now + self._cache_seconds, plans)
        self._observe("database", now)
        return plans

    def _observe(self, source: str, started: float) -> None:
        if self._metrics is not None:
            self._metrics.entitlement_checked(source, time.monotonic() - started)

    async def allows(self, user_id: str, plan_ids: Iterable[str], *, fresh: bool = False) -> bool:
        return not (await self.plans_of(user_id, fresh=fresh)).isdisjoint(plan_ids)

    async def on_change(self, change: EntitlementChanged) -> None:
        self._cache.pop(change.user_id, None)
