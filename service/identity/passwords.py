"""Password hashing with argon2id, in worker threads so a sign-in never stalls the event loop.

One argon2id hash or check at argon2-cffi's default parameters (RFC 9106's low-memory profile:
3 passes over 64 MiB, 4 lanes) takes 50-110 ms of CPU on the 2-core machines this is measured on.
Run on the event loop, every sign-in would hold up each tool call, webhook and completion notice on
the replica for that long. argon2-cffi releases the GIL while it hashes, so a worker thread keeps
the loop free; a limiter bounds how many run at once, since each holds its memory until done, and
how many may wait for one: beyond that `HashingBusy` is raised at once, so a flood of sign-ins is
refused cheaply instead of queueing without end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

if TYPE_CHECKING:
    from service.settings import Settings

_T = TypeVar("_T")


# What a refused caller is told to wait: a queue's worth of hashes takes well under a second.
BUSY_RETRY_AFTER_SECONDS = 1


class HashingBusy(Exception):
    """Every hashing slot is taken and the queue for them is full."""

    retry_after_seconds = BUSY_RETRY_AFTER_SECONDS


class PasswordHashing:
    def __init__(
        self, *, time_cost: int, memory_kib: int, parallelism: int, concurrency: int, queue: int = 16
    ) -> None:
        self._hasher = PasswordHasher(time_cost=time_cost, memory_cost=memory_kib, parallelism=parallelism)
        self._slots = asyncio.Semaphore(concurrency)
        self._admitted_limit = concurrency + queue
        self._admitted = 0
        self._dummy_hash: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> PasswordHashing:
        return cls(
            time_cost=settings.password_hash_time_cost,
            memory_kib=settings.password_hash_memory_kib,
            parallelism=settings.password_hash_parallelism,
            concurrency=settings.password_hash_concurrency,
            queue=settings.password_hash_queue,
        )

    @property
    def in_flight(self) -> int:
        """Hashes and checks running or waiting for a slot."""
        return self._admitted

    async def hash(self, password: str) -> str:
        return await self._in_thread(self._hasher.hash, password)

    async def verify(self, password_hash: str | None, password: str) -> bool:
        """Whether `password` matches; an unknown user (`password_hash` None) costs a check too, so
        the answer's timing does not tell which usernames exist."""
        if password_hash is None and self._dummy_hash is None:
            self._dummy_hash = await self.hash("not-a-real-password")
        checked = password_hash or self._dummy_hash
        assert checked is not None
        matched = await self._in_thread(self._check, checked, password)
        return matched and password_hash is not None

    def needs_rehash(self, password_hash: str) -> bool:
        """Whether the hash was made with other parameters than the ones configured now."""
        try:
            return self._hasher.check_needs_rehash(password_hash)
        except InvalidHashError:
            return True

    async def _in_thread(self, work: Callable[..., _T], *args: str) -> _T:
        if self._admitted >= self._admitted_limit:
            raise HashingBusy
        self._admitted += 1
        try:
            async with self._slots:
                return await asyncio.to_thread(work, *args)
        finally:
            self._admitted -= 1

    def _check(self, password_hash: str, password: str) -> bool:
        try:
            return self._hasher.verify(password_hash, password)
        except (VerificationError, InvalidHashError):
            return False
