"""Waiting for state the test cannot await: another process's, or a counter the service keeps."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def until(condition_met: Callable[[], Awaitable[bool]], what: str, seconds: float = 30.0) -> None:
    """Polls `condition_met` until it holds, failing with `what` after `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            while not await condition_met():  # noqa: ASYNC110 - state with nothing to await
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"not reached within {seconds} s: {what}") from None
