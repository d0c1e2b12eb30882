"""Sampling for audit events a caller can repeat at will, such as forged webhooks or page views.

One audit row per request would let a stranger (or any signed-in user) fill the table at the rate
they can send requests; instead the first event of each key is recorded, then at most one per
interval, each carrying how many events of that key it stands for. Metrics count every event.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

DEFAULT_MAX_KEYS = 10_000


class AuditSampler:
    def __init__(
        self,
        interval_seconds: float,
        *,
        max_keys: int = DEFAULT_MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval_seconds
        self._max_keys = max_keys
        self._clock = clock
        # Per key: when a row is next due, and the events since the last row. Least recently
        # seen first, so that past `max_keys` the one forgotten is the one seen longest ago.
        self._keys: dict[Hashable, tuple[float, int]] = {}

    def take(self, key: Hashable) -> int | None:
        """Count one event; when a row is due, the number of events it stands for, else None.

        A key forgotten past `max_keys` starts afresh: its next event is recorded, and the events
        it had not recorded yet go uncounted in the audit (not in the metrics)."""
        next_at, unrecorded = self._keys.pop(key, (0.0, 0))
        unrecorded += 1
        now = self._clock()
        if now < next_at:
            self._keys[key] = (next_at, unrecorded)
            return None
        self._keys[key] = (now + self._interval, 0)
        while len(self._keys) > self._max_keys:
            del self._keys[next(iter(self._keys))]
        return unrecorded
