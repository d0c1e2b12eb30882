"""The worker threads synchronous tools run in: `anyio.to_thread.run_sync` with a limiter of their own.

A sync tool must not run on the event loop, so every call hops to one of anyio's worker threads,
as the MCP SDK does for its own sync tools: the caller's context variables go along, a caller
cancelled while its tool runs waits for the tool to return, and inside the thread
`anyio.from_thread` reaches the loop. The limiter is the tools' own (`SYNC_TOOL_THREADS`), so a
burst of slow tools cannot take every thread from the SDK's and the database's own hops. One user
holds at most `SYNC_TOOL_THREADS_PER_USER` of them at once, so that one user's slow calls leave
threads for everyone else; their further calls wait for one of their own to end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token

T = TypeVar("T")


class _Share:
    """One user's places among the threads, and how many of their calls hold or await one."""

    def __init__(self, places: int) -> None:
        # asyncio's semaphore takes a free place without a trip around the event loop.
        self.places = asyncio.Semaphore(places)
        self.calls = 0


class ToolThreads:
    """At most `limit` sync tool calls run at once, `per_user` of one user's; made in the lifespan
    (it needs a running loop)."""

    def __init__(self, limit: int, per_user: int | None = None) -> None:
        self._limiter = anyio.CapacityLimiter(limit)
        self._per_user = min(per_user or limit, limit)
        self._shares: dict[str, _Share] = {}

    @property
    def limit(self) -> int:
        return int(self._limiter.total_tokens)

    @property
    def per_user(self) -> int:
        return self._per_user

    async def run_sync(self, function: Callable[[], T]) -> T:
        """`function()` in a worker thread; the caller waits for it even when cancelled."""
        token = get_access_token()
        user = (token.subject or f"client:{token.client_id}") if token is not None else None
        if user is None or self._per_user >= self.limit:
            return await anyio.to_thread.run_sync(function, limiter=self._limiter)
        share = self._shares.get(user)
        if share is None:
            share = self._shares[user] = _Share(self._per_user)
        share.calls += 1
        try:
            async with share.places:
                return await anyio.to_thread.run_sync(function, limiter=self._limiter)
        finally:
            share.calls -= 1
            if share.calls == 0:
                del self._shares[user]
