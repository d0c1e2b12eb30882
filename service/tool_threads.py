"""The worker threads synchronous tools run in: `anyio.to_thread.run_sync` with a limiter of their own.

A sync tool must not run on the event loop, so every call hops to one of anyio's worker threads,
as the MCP SDK does for its own sync tools: the caller's context variables go along, a caller
cancelled while its tool runs waits for the tool to return, and inside the thread
`anyio.from_thread` reaches the loop. The limiter is the tools' own (`SYNC_TOOL_THREADS`), so a
burst of slow tools cannot take every thread from the SDK's and the database's own hops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")


class ToolThreads:
    """At most `limit` sync tool calls run at once; made in the lifespan (it needs a running loop)."""

    def __init__(self, limit: int) -> None:
        self._limiter = anyio.CapacityLimiter(limit)

    @property
    def limit(self) -> int:
        return int(self._limiter.total_tokens)

    async def run_sync(self, function: Callable[[], T]) -> T:
        """`function()` in a worker thread; the caller waits for it even when cancelled."""
        return await anyio.to_thread.run_sync(function, limiter=self._limiter)
