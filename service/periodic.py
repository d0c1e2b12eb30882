"""Background jobs that run on a timer for as long as the app runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

logger = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def every(seconds: float, job: Callable[[], Awaitable[object]], *, name: str) -> AsyncIterator[None]:
    """Runs `job` every `seconds` while the block runs (0 disables it); a failing run is logged, not fatal."""
    if seconds <= 0:
        yield
        return

    async def loop() -> None:
        while True:
            await asyncio.sleep(seconds)
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
