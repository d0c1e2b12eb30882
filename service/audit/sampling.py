"""Sampling for audit events anyone can trigger without signing in, such as forged webhooks.

One audit row per unauthenticated request would let a stranger fill the table at the rate they
can post; instead the first event of each reason is recorded, then at most one per interval, each
carrying how many events of that reason it stands for. Metrics count every event.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class AuditSampler:
    def __init__(self, interval_seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval_seconds
        self._clock = clock
        self._next_at: dict[str, float] = {}
        self._unrecorded: dict[str, int] = {}

    def take(self, reason: str) -> int | None:
        """Count one event; when a row is due, the number of events it stands for, else None.

        `reason` comes from a fixed set of labels, so the dictionaries stay small."""
        unrecorded = self._unrecorded.get(reason, 0) + 1
        now = self._clock()
        if now < self._next_at.get(reason, 0.0):
            self._unrecorded[reason] = unrecorded
            return None
        self._next_at[reason] = now + self._interval
        self._unrecorded[reason] = 0
        return unrecorded
