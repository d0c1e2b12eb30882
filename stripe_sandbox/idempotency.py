"""Idempotency keys as Stripe keeps them: a POST's answer is saved under its key and replayed for a
repeat of the same request, and refused for a different one, until Stripe removes the key (after
at least 24 hours). The sandbox removes it after exactly 24 hours of sandbox time, and keeps at
most `max_keys`, the oldest dropped first, so a long-running sandbox's memory stays bounded."""

from __future__ import annotations

from dataclasses import dataclass

KEY_LIFETIME_SECONDS = 24 * 3600
DEFAULT_MAX_KEYS = 10_000


@dataclass(frozen=True)
class SavedAnswer:
    fingerprint: str  # of the request: method, path and body
    status: int
    body: bytes
    saved_at: int  # sandbox time, in seconds


class IdempotencyKeys:
    def __init__(self, *, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self._max_keys = max_keys
        # Per (API key, idempotency key), in the order saved: the oldest first.
        self._saved: dict[tuple[str, str], SavedAnswer] = {}

    def __len__(self) -> int:
        return len(self._saved)

    def get(self, api_key: str, idempotency_key: str, now: int) -> SavedAnswer | None:
        self._forget_expired(now)
        return self._saved.get((api_key, idempotency_key))

    def save(self, api_key: str, idempotency_key: str, answer: SavedAnswer) -> None:
        self._saved.pop((api_key, idempotency_key), None)
        self._saved[(api_key, idempotency_key)] = answer
        while len(self._saved) > self._max_keys:
            del self._saved[next(iter(self._saved))]

    def _forget_expired(self, now: int) -> None:
        while self._saved:
            oldest = next(iter(self._saved))
            if now - self._saved[oldest].saved_at < KEY_LIFETIME_SECONDS:
                return
            del self._saved[oldest]
