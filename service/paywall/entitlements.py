"""Entitlement checks with an in-process cache, invalidated by the completion bus.

The cache keeps paid tool calls free of database round trips; its short lifetime bounds how long a
change made on another replica (or a grace period running out) can go unseen.
"""

from __future__ import annotations

import asyncio
import functools
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
        # Database reads in flight, per user, and how many changes the bus has brought so far.
        self._reading: dict[str, asyncio.Future[frozenset[str]]] = {}
        self._changes = 0
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

    def saw_credits(self, user_id: str) -> None:
        """The user has a credit again (one given back here): their next unpaid call reads the balance."""
        self._no_credits.pop(user_id, None)

    async def plans_of(self, user_id: str, *, fresh: bool = False) -> frozenset[str]:
        """The plans the user's subscriptions grant now. Callers that find no cached answer share
        one database read per user (`fresh` ones read anew), so the many calls of a busy user
        whose entry just expired do not each queue for a connection."""
        now = time.monotonic()
        cached = self._cache.get(user_id)
        if cached is not None and not fresh and cached[0] > now:
            self._observe("cache", now)
            return cached[1]
        if fresh:
            plans = await self._read(user_id)
        else:
            reading = self._reading.get(user_id)
            if reading is None:
                reading = self._reading[user_id] = asyncio.ensure_future(self._read(user_id))
                reading.add_done_callback(functools.partial(self._read_done, user_id))
            # One caller giving up (its client hung up) does not cancel the others' read.
            plans = await asyncio.shield(reading)
        self._observe("database", now)
        return plans

    async def _read(self, user_id: str) -> frozenset[str]:
        changes = self._changes
        async with self._sessions() as session:
            granting = tuple(await granting_subscriptions(session, user_id, grace=self._grace))
        plans = frozenset(row.plan_id for row in granting)
        if changes == self._changes:  # a change seen meanwhile may not be in what was read
            self._cache[user_id] = (time.monotonic() + self._cache_seconds, plans, granting)
        return plans

    def _read_done(self, user_id: str, reading: asyncio.Future[frozenset[str]]) -> None:
        if self._reading.get(user_id) is reading:
            del self._reading[user_id]
        if not reading.cancelled():
            reading.exception()  # retrieved here too: every caller may have given up

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
        self._changes += 1
        self._cache.pop(change.user_id, None)
        self._reading.pop(change.user_id, None)
        self._no_credits.pop(change.user_id, None)
