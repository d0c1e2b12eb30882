"""Group commit: work submitted while a batch is being committed waits and goes in the next batch.

A webhook's transaction costs about the same for one event as for dozens (a connection checkout,
BEGIN, COMMIT and the round trips between them), so under load the events that arrive together
share one. Items still being prepared (an event whose Stripe read is in flight) can be announced
with `coming()`: a batch about to start waits up to `max_wait` for them, and not at all when
nothing is on its way, so a lone event never waits for company. Each submitter still gets its own
result, or its own exception, only after its batch committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

BatchRunner = Callable[[Sequence[Item]], Awaitable[Sequence[Result | Exception]]]


class GroupCommit(Generic[Item, Result]):
    """Runs `run_batch` on everything submitted, one batch at a time, at most `max_batch` per batch.

    `run_batch` answers one result or exception per item, in order; an exception escaping it
    fails every item of that batch.
    """

    def __init__(
        self, run_batch: BatchRunner[Item, Result], *, max_batch: int = 64, max_wait: float = 0.002
    ) -> None:
        self._run_batch = run_batch
        self._max_batch = max_batch
        self._max_wait = max_wait
        self._coming = 0
        self._changed = asyncio.Event()
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self._drainer: asyncio.Task[None] | None = None

    @property
    def queued(self) -> int:
        """Items submitted and not yet taken into a batch."""
        return len(self._waiting)

    @contextmanager
    def coming(self) -> Iterator[None]:
        """Around the preparation of an item that will be submitted (or given up) right after."""
        self._coming += 1
        try:
            yield
        finally:
            self._coming -= 1
            self._changed.set()

    async def submit(self, item: Item) -> Result:
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        self._changed.set()
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain())
        # A submitter that gives up (its client hung up) cancels only its own wait: the batch
        # it joined is still committed, exactly as a lone transaction would have been.
        return await future

    async def _wait_for_company(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_wait
        while self._coming and len(self._waiting) < self._max_batch:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return

    async def _drain(self) -> None:
        try:
            while self._waiting:
                await self._wait_for_company()
                batch = self._waiting[: self._max_batch]
                del self._waiting[: self._max_batch]
                try:
                    results: Sequence[Result | Exception] = await self._run_batch([item for item, _ in batch])
                except Exception as exc:
                    results = [exc] * len(batch)
                except BaseException:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(RuntimeError("webhook processing stopped"))
                    raise
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, Exception):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self._drainer = None
            if self._waiting:
                # Left over by a cancelled drain (shutdown); a new submitter restarts draining.
                for _, future in self._waiting:
                    if not future.done():
                        future.set_exception(RuntimeError("webhook processing stopped"))
                self._waiting.clear()
