"""Failed sign-in throttling per account and per client IP, with exponential lockouts.

After `threshold` failures a key (an account name or a client IP) is locked out for `lockout`
seconds, doubled with each further failure up to `lockout_max`; a key with no failure for
`memory` seconds is forgotten, and a successful sign-in clears its account. While locked, even the
right password is refused, without a hash being computed, so a lockout costs the service nothing.
State lives in this process (per replica), in a table bounded to `max_entries` keys, the least
recently used evicted first.

An attempt reserves a place on each of its keys before it is checked (`reserve`), so concurrent
attempts cannot overtake the failures they would record: attempts under way plus failures on record
stay within a key's threshold, and after a lockout one attempt at a time. A browser that signed in
to an account before (a known device) is counted on its own (account, device) key instead of the
account's, so a stranger's failures cannot lock the account's owner out of a browser they use.

`AddressRateLimiter` is the other kind: a plain rate per client address, every request counted.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv6Address, ip_address, ip_network
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from service.settings import SignInSettings

# Lockouts stop doubling after this many steps; the cap is reached long before on any setting.
_MAX_DOUBLINGS = 30


@dataclass
class _Failures:
    count: int
    last: float
    locked_until: float
    in_flight: int = 0  # attempts reserved and not yet settled


Key = tuple[str, str]
Outcome = Literal["failed", "succeeded", "released"]


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
        self._entries: OrderedDict[Key, _Failures] = OrderedDict()

    def _keys(
        self, account: str | None, client_ip: str | None, device: str | None = None
    ) -> list[tuple[Key, int]]:
        keys: list[tuple[Key, int]] = []
        if account is not None and device is not None:
            # Device ids are URL-safe base64, so no two (account, device) pairs share a key.
            keys.append((("device", f"{account}\x00{device}"), self._policy.account_failures))
        elif account is not None:
            keys.append((("account", account), self._policy.account_failures))
        if client_ip is not None:
            keys.append((("ip", ip_key(client_ip)), self._policy.ip_failures))
        return keys

    def _live(self, key: Key, now: float) -> _Failures | None:
        entry = self._entries.get(key)
        if entry is not None and now - entry.last > self._policy.memory_seconds:
            if entry.in_flight == 0:
                del self._entries[key]
                return None
            entry.count, entry.locked_until = 0, 0.0  # forgotten; its attempts under way still hold places
        return entry

    def _evict(self) -> None:
        while len(self._entries) > self._policy.max_entries:
            self._entries.popitem(last=False)

    def reserve(
        self, *, account: str | None, client_ip: str | None, device: str | None = None
    ) -> Attempt | int:
        """A place for one attempt on each key, or the whole seconds to wait when a key has none.

        `device` names a known device of `account`: the attempt then counts against that pair,
        not against the account as a whole."""
        now = self._clock()
        keys = self._keys(account, client_ip, device)
        waits: list[float] = []
        for key, threshold in keys:
            entry = self._live(key, now)
            if entry is None:
                continue
            if entry.locked_until > now:
                waits.append(entry.locked_until - now)
            elif entry.in_flight >= max(1, threshold - entry.count):
                waits.append(1.0)  # the attempts under way decide whether the key locks
        if waits:
            return max(1, math.ceil(max(waits)))
        for key, _ in keys:
            entry = self._live(key, now) or _Failures(count=0, last=now, locked_until=0.0)
            entry.in_flight += 1
            self._entries[key] = entry
            self._entries.move_to_end(key)
        self._evict()
        return Attempt(self, keys)

    def settle(self, keys: list[tuple[Key, int]], outcome: Outcome) -> None:
        """Ends an attempt reserved on `keys`; `Attempt` calls it."""
        now = self._clock()
        for key, threshold in keys:
            entry = self._entries.get(key)
            if entry is not None:
                entry.in_flight = max(0, entry.in_flight - 1)
            if outcome == "failed":
                self._record_failure(key, threshold, now)
            elif outcome == "succeeded" and key[0] != "ip":
                self._entries.pop(key, None)  # the account's (or the device's) failures are cleared
            elif entry is not None and entry.count == 0 and entry.in_flight == 0:
                del self._entries[key]  # nothing left to remember
        self._evict()

    def _record_failure(self, key: Key, threshold: int, now: float) -> None:
        entry = self._live(key, now) or _Failures(count=0, last=now, locked_until=0.0)
        entry.count += 1
        entry.last = now
        if entry.count >= threshold:
            doublings = min(entry.count - threshold, _MAX_DOUBLINGS)
            lockout = min(self._policy.lockout_max_seconds, self._policy.lockout_seconds * 2**doublings)
            entry.locked_until = now + lockout
        self._entries[key] = entry
        self._entries.move_to_end(key)

    def retry_after(self, *, account: str | None, client_ip: str | None) -> int | None:
        """Whole seconds until the account and the IP may try again, or None if both may now."""
        now = self._clock()
        waits = [
            entry.locked_until - now
            for key, _ in self._keys(account, client_ip)
            if (entry := self._live(key, now)) is not None and entry.locked_until > now
        ]
        return max(1, math.ceil(max(waits))) if waits else None

    def __len__(self) -> int:
        """Keys (accounts, known devices and addresses) with failures or attempts under way on record."""
        return len(self._entries)


class Attempt:
    """A reserved attempt; settle it once with `failed`, `succeeded` or `release`."""

    def __init__(self, throttle: SignInThrottle, keys: list[tuple[Key, int]]) -> None:
        self._throttle = throttle
        self._keys = keys
        self._settled = False

    def failed(self) -> None:
        """Turns the places into failures on every key."""
        self._settle("failed")

    def succeeded(self) -> None:
        """Gives the places back and clears the account's (or the device's) failures."""
        self._settle("succeeded")

    def release(self) -> None:
        """Gives the places back, counting nothing: the attempt was not decided."""
        self._settle("released")

    def _settle(self, outcome: Outcome) -> None:
        if not self._settled:
            self._settled = True
            self._throttle.settle(self._keys, outcome)


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
