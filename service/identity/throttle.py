"""Failed sign-in throttling per account and per client IP, with exponential lockouts.

After `threshold` failures a key (an account name or a client IP) is locked out for `lockout`
seconds, doubled with each further failure up to `lockout_max`; a key with no failure for
`memory` seconds is forgotten, and a successful sign-in clears its account. While locked, even the
right password is refused, without a hash being computed, so a lockout costs the service nothing.
State lives in this process (per replica), in a table bounded to `max_entries` keys, the least
recently failed evicted first.

`AddressRateLimiter` is the other kind: a plain rate per client address, every request counted.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv6Address, ip_address, ip_network
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.settings import SignInSettings

# Lockouts stop doubling after this many steps; the cap is reached long before on any setting.
_MAX_DOUBLINGS = 30


@dataclass
class _Failures:
    count: int
    last: float
    locked_until: float


@dataclass(frozen=True)
class ThrottlePolicy:
    account_failures: int
    ip_failures: int
    lockout_seconds: float
    lockout_max_seconds: float
    memory_seconds: float
    max_entries: int


def throttle_policy(settings: SignInSettings) -> ThrottlePolicy:
    return ThrottlePolicy(
        account_failures=settings.account_failures,
        ip_failures=settings.ip_failures,
        lockout_seconds=settings.lockout_seconds,
        lockout_max_seconds=settings.lockout_max_seconds,
        memory_seconds=settings.failure_memory_seconds,
        max_entries=settings.throttle_entries,
    )


def ip_key(client_ip: str) -> str:
    """IPv6 clients are keyed by their /64, which one host can fill with addresses at will."""
    try:
        address = ip_address(client_ip)
    except ValueError:
        return client_ip
    if isinstance(address, IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ip_network(f"{address}/64", strict=False))
    return str(address)


class SignInThrottle:
    def __init__(self, policy: ThrottlePolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], _Failures] = OrderedDict()

    def _keys(self, account: str | None, client_ip: str | None) -> list[tuple[tuple[str, str], int]]:
        keys: list[tuple[tuple[str, str], int]] = []
        if account is not None:
            keys.append((("account", account), self._policy.account_failures))
        if client_ip is not None:
            keys.append((("ip", ip_key(client_ip)), self._policy.ip_failures))
        return keys

    def _live(self, key: tuple[str, str], now: float) -> _Failures | None:
        entry = self._entries.get(key)
        if entry is not None and now - entry.last > self._policy.memory_seconds:
            del self._entries[key]
            return None
        return entry

    def retry_after(self, *, account: str | None, client_ip: str | None) -> int | None:
        """Whole seconds until the account and the IP may try again, or None if both may now."""
        now = self._clock()
        waits = [
            entry.locked_until - now
            for key, _ in self._keys(account, client_ip)
            if (entry := self._live(key, now)) is not None and entry.locked_until > now
        ]
        return max(1, math.ceil(max(waits))) if waits else None

    def failed(self, *, account: str | None, client_ip: str | None) -> None:
        now = self._clock()
        for key, threshold in self._keys(account, client_ip):
            entry = self._live(key, now) or _Failures(count=0, last=now, locked_until=0.0)
            entry.count += 1
            entry.last = now
            if entry.count >= threshold:
                doublings = min(entry.count - threshold, _MAX_DOUBLINGS)
                lockout = min(self._policy.lockout_max_seconds, self._policy.lockout_seconds * 2**doublings)
                entry.locked_until = now + lockout
            self._entries[key] = entry
            self._entries.move_to_end(key)
        while len(self._entries) > self._policy.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        """Keys (accounts and addresses) with failures on record."""
        return len(self._entries)

    def succeeded(self, *, account: str) -> None:
        self._entries.pop(("account", account), None)


class AddressRateLimiter:
    """A token bucket per client address (keyed with `ip_key`), held in this process.

    Refusing costs no database work, so a flood stays cheap; with several replicas an address
    gets up to (replicas x limit) per window. Client registration and the OIDC callback use it.
    """

    def __init__(self, *, per_window: int, window_seconds: float, max_addresses: int = 10_000) -> None:
        self._capacity = float(per_window)
        self._refill_per_second = per_window / window_seconds
        self._max_addresses = max_addresses
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address: (tokens, at)

    def allow(self, address: str) -> bool:
        """Takes one request from `address`'s bucket; False when it is empty."""
        now = time.monotonic()
        tokens, at = self._buckets.pop(address, (self._capacity, now))
        tokens = min(self._capacity, tokens + (now - at) * self._refill_per_second)
        allowed = tokens >= 1.0
        self._buckets[address] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self._max_addresses:
            self._buckets.popitem(last=False)
        return allowed

    def retry_after(self, address: str) -> int:
        """Whole seconds until `address` may try again."""
        tokens, _ = self._buckets.get(address, (self._capacity, 0.0))
        return max(1, int((1.0 - tokens) / self._refill_per_second) + 1)
