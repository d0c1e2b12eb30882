"""Verified bearer tokens, remembered briefly so that a tool call costs no database round trip.

Keyed by the token's digest, never the token. An entry lives at most `ttl` seconds and never past
the token's own expiry; revoking a grant drops its entries at once, here and, through the
completion bus, on every other replica. Revocation news a replica missed takes effect within `ttl`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Generic, TypeVar

T = TypeVar("T")


class TokenCache(Generic[T]):
    def __init__(self, *, ttl: float, max_entries: int = 10_000) -> None:
        self._ttl = ttl
        self._max_entries = max_entries
        self._entries: OrderedDict[str, tuple[float, str, T]] = OrderedDict()

    def get(self, key: str) -> T | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        valid_until, _, value = entry
        if valid_until <= time.time():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: str, grant_id: str, value: T, *, expires_at: float | None) -> None:
        if self._ttl <= 0:
            return
        valid_until = time.time() + self._ttl
        if expires_at is not None:
            valid_until = min(valid_until, expires_at)
        self._entries[key] = (valid_until, grant_id, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def forget_grant(self, grant_id: str) -> None:
        for key in [key for key, (_, grant, _) in self._entries.items() if grant == grant_id]:
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()
