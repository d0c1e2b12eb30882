"""Password hashing with argon2id, in worker threads so a sign-in never stalls the event loop.

One argon2id hash or check at argon2-cffi's default parameters (RFC 9106's low-memory profile:
3 passes over 64 MiB, 4 lanes) takes long enough (docs/adr/0008-measured-choices.md) that, run on
the event loop, every sign-in would hold up each tool call, webhook and completion notice on the
replica meanwhile. argon2-cffi releases the GIL while it hashes, so a worker thread keeps
the loop free; a limiter bounds how many run at once, since each holds its memory until done, and
how many may wait for one: beyond that `HashingBusy` is raised at once, so a flood of sign-ins is
refused cheaply instead of queueing without end. The hashing threads run at a lower scheduling
priority (a higher nice value; argon2's lane threads inherit it), so on a saturated machine the
event loop, and every request but sign-ins, still gets the CPU first.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

if TYPE_CHECKING:
    from service.settings import PasswordHashingSettings

_T = TypeVar("_T")


# Added to the hashing threads' nice value: the scheduler then favours the event loop's thread.
HASHING_NICE_INCREMENT = 10
# What a refused caller is told to wait: a queue's worth of hashes takes well under a second.
BUSY_RETRY_AFTER_SECONDS = 1


class HashingBusy(Exception):
    """Every hashing slot is taken and the queue for them is full."""

    retry_after_seconds = BUSY_RETRY_AFTER_SECONDS


# Every hash argon2 makes starts so; anything else stored is a marker no password matches.
ARGON2_PREFIX = "$argon2"


class PasswordHashing:
    def __init__(
        self, *, time_cost: int, memory_kib: int, parallelism: int, concurrency: int, queue: int = 16
    ) -> None:
        self._hasher = PasswordHasher(time_cost=time_cost, memory_cost=memory_kib, parallelism=parallelism)
        self._slots = asyncio.Semaphore(concurrency)
        self._admitted_limit = concurrency + queue
        self._admitted = 0
        self._running = 0
        self._threads = ThreadPoolExecutor(
            max_workers=concurrency, thread_name_prefix="password-hashing", initializer=_lower_priority
        )
        self._dummy_hash: str | None = None

    @classmethod
    def from_settings(cls, settings: PasswordHashingSettings) -> PasswordHashing:
        return cls(
            time_cost=settings.time_cost,
            memory_kib=settings.memory_kib,
            parallelism=settings.parallelism,
            concurrency=settings.concurrency,
            queue=settings.queue,
        )

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    @property
    def saturated(self) -> bool:
        """Every slot and queue place is taken: a check asked for now would be refused."""
        return self._admitted >= self._admitted_limit

    @property
    def in_flight(self) -> int:
        """Hashes and checks running or waiting for a slot."""
        return self._admitted

    @property
    def computing(self) -> int:
        """Hashes and checks running in a worker thread right now."""
        return self._running

    async def hash(self, password: str) -> str:
        return await self._in_thread(self._hasher.hash, password)

    async def verify(self, password_hash: str | None, password: str) -> bool:
        """Whether `password` matches; an unknown user (`password_hash` None) costs a check too, so
        the answer's timing does not tell which usernames exist."""

        async def given() -> str | None:
            return password_hash

        return await self.verify_stored(given, password)

    async def verify_stored(self, load_hash: Callable[[], Awaitable[str | None]], password: str) -> bool:
        """`verify` against the hash `load_hash` reads (None: no such user), read only once this check
        is admitted and has its slot: a sign-in refused as busy, or waiting, costs no database work."""
        async with self._admitted_slot():
            stored = await load_hash()
            # A marker that no password matches (a disabled or an external account) costs a check
            # too: answering it at once would tell which usernames carry one.
            password_hash = stored if stored is not None and stored.startswith(ARGON2_PREFIX) else None
            if password_hash is None and self._dummy_hash is None:
                self._dummy_hash = await self._run(self._hasher.hash, "not-a-real-password")
            checked = password_hash or self._dummy_hash
            assert checked is not None
            matched = await self._run(self._check, checked, password)
        return matched and password_hash is not None

    def needs_rehash(self, password_hash: str) -> bool:
        """Whether the hash was made with other parameters than the ones configured now."""
        try:
            return self._hasher.check_needs_rehash(password_hash)
        except InvalidHashError:
            return True

    @asynccontextmanager
    async def _admitted_slot(self) -> AsyncIterator[None]:
        if self.saturated:
            raise HashingBusy
        self._admitted += 1
        try:
            async with self._slots:
                yield
        finally:
            self._admitted -= 1

    async def _run(self, work: Callable[..., _T], *args: str) -> _T:
        self._running += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._threads, work, *args)
        finally:
            self._running -= 1

    async def _in_thread(self, work: Callable[..., _T], *args: str) -> _T:
        async with self._admitted_slot():
            return await self._run(work, *args)

    def _check(self, password_hash: str, password: str) -> bool:
        try:
            return self._hasher.verify(password_hash, password)
        except (VerificationError, InvalidHashError):
            return False


def _lower_priority() -> None:
    """Linux keeps a nice value per thread; elsewhere, or if refused, hashing keeps the default."""
    try:
        native_id = threading.get_native_id()
        os.setpriority(
            os.PRIO_PROCESS, native_id, os.getpriority(os.PRIO_PROCESS, native_id) + HASHING_NICE_INCREMENT
        )
    except (AttributeError, OSError):
        pass
