"""Background jobs that run on a timer for as long as the app runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable

logger = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def every(
    seconds: float, job: Callable[[], Awaitable[object]], *, name: str, jitter: float = 0.0
) -> AsyncIterator[None]:
    """Runs `job` every `seconds` while the block runs (0 disables it); a failing run is logged, not fatal.

    `jitter` (a fraction) stretches or shrinks each wait at random by up to that much, so that
    processes started together, such as a deployment's replicas, do not run the job in step.
    """
    if seconds <= 0:
        yield
        return

    async def loop() -> None:
        while True:
            await asyncio.sleep(seconds * random.uniform(1 - jitter, 1 + jitter))  # noqa: S311 - not a secret
            try:
                await job()
            except Exception:
                logger.exception("%s failed; will try again", name)

    task = asyncio.create_task(loop(), name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Pace:
    """A token bucket for a background job's steps: up to `per_second` a second, with one second's
    worth allowed at once (0: no limit).

    A long job that runs flat out takes the cores from the requests that share them and, when its
    steps read from Stripe, spends the account's rate limit that webhook handling needs as well.
    """

    def __init__(
        self,
        per_second: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self._rate = per_second
        self._capacity = max(1.0, per_second)
        self._tokens = self._capacity
        self._clock = clock
        self._sleep = sleep
        self._updated = clock()

    async def step(self) -> None:
        """Returns when the next step may start."""
        if self._rate <= 0:
            return
        now = self._clock()
        self._tokens = min(self._capacity, self._tokens + (now - self._updated) * self._rate)
        self._updated = now
        if self._tokens < 1:
            await self._sleep((1 - self._tokens) / self._rate)
            now = self._clock()
            self._tokens = min(self._capacity, self._tokens + (now - self._updated) * self._rate)
            self._updated = now
        self._tokens -= 1
