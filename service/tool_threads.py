"""The threads synchronous tools run in, woken on the event loop's own CPU when a call runs alone.

A sync tool must not run on the event loop, so every call hops to a worker thread and back. The
SDK hops with `anyio.to_thread.run_sync`. On the cloud VMs this service is measured on, Linux
wakes the waiting worker on the *other*, idle vCPU, and waking an idle vCPU is a trip through
the hypervisor: a hop to a thread and back took ~350 us of CPU and ~500 us of wall time there
(`anyio.to_thread.run_sync` of a function that returns at once), against ~80-120 us when both
threads share one CPU. At one call at a time that was a third of a `tools/call`.

So before a hand-off the loop's thread moves the worker it is about to wake onto the CPU the loop
is running on (one `sched_setaffinity` when the loop has moved since, otherwise nothing; SQLite's
connection thread is placed the same way, `service/cpu_placement.py`). The
waker, not the woken thread, must do it: a worker that moved itself would already have been woken
on the far CPU. The loop's own thread is never pinned, so the kernel still balances it. When
another tool call is still running in a thread, the worker is left free to use every CPU the
process may: a tool that releases the GIL (numpy, compression, blocking I/O) should get them.

Everything else is as `anyio.to_thread.run_sync` does it, which is what tools written for the SDK
expect: the caller's context variables, the default thread limiter (shared with the SDK's own
hops), a caller cancelled while its tool runs waits for the tool to return, and inside the thread
`anyio.from_thread` reaches the loop. Where the OS offers no thread affinity (not Linux) or refuses
it, tools still run in these threads, just without the placement.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import Context, copy_context
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import sniffio

from service.cpu_placement import sched_getcpu

logger = logging.getLogger(__name__)

T = TypeVar("T")
IDLE_SECONDS = 10.0  # a worker idle this long is ended at the next hand-off, as anyio does
_Job = tuple[Callable[[], Any], Context, asyncio.Future[Any]]


@contextmanager
def _anyio_worker(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Make the calling thread an anyio worker thread of `loop`, so `anyio.from_thread` works in
    tools as it does in the SDK's threads. anyio offers this only privately; without it, nothing."""
    try:
        from anyio._backends._asyncio import AsyncIOBackend
        from anyio._core._eventloop import claim_worker_thread
    except ImportError:  # pragma: no cover - a future anyio that moved them
        yield
        return
    with claim_worker_thread(AsyncIOBackend, loop):
        yield


class _Worker:
    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.cpus: frozenset[int] | None = None  # the affinity last set; None: never set
        self.idle_since = time.monotonic()
        self.thread = threading.Thread(target=self._run, args=(loop,), name=name, daemon=True)
        self.thread.start()

    @property
    def native_id(self) -> int:
        native_id = self.thread.native_id
        assert native_id is not None  # set before start() returns
        return native_id

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        with _anyio_worker(loop):
            while (job := self.jobs.get()) is not None:
                function, context, future = job
                result: Any = None
                error: BaseException | None = None
                try:
                    result = context.run(function)
                except BaseException as exc:  # handed to the caller, as anyio does
                    error = exc
                try:
                    loop.call_soon_threadsafe(_settle, future, result, error)
                except RuntimeError:  # the loop has closed: nobody is waiting any more
                    return
                del job, function, context, future, result, error


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class ToolThreads:
    """Worker threads for sync tools; made in the lifespan, `close`d at its end."""

    def __init__(self, *, follow_loop_cpu: bool = True) -> None:
        self._getcpu = sched_getcpu() if follow_loop_cpu else None
        self._all_cpus = frozenset(os.sched_getaffinity(0)) if self._getcpu is not None else None
        self._idle: list[_Worker] = []  # a stack: the most recently idle worker is woken first
        self._names = (f"tool-thread-{number}" for number in itertools.count())
        self._running = 0
        self._closed = False

    @property
    def follows_loop_cpu(self) -> bool:
        return self._getcpu is not None

    async def run_sync(self, function: Callable[[], T]) -> T:
        """`function()` in a worker thread; the caller waits for it even when cancelled."""
        await anyio.lowlevel.checkpoint()
        if self._closed:
            raise RuntimeError("the service is shutting down: no new tool calls")
        loop = asyncio.get_running_loop()
        async with anyio.to_thread.current_default_thread_limiter():
            with anyio.CancelScope(shield=True):
                worker = self._take(loop)
                self._place(worker)
                context = copy_context()
                # As anyio does: code in the thread must not believe it runs on an event loop.
                context.run(sniffio.current_async_library_cvar.set, None)
                future: asyncio.Future[T] = loop.create_future()
                self._running += 1
                try:
                    worker.jobs.put((function, context, future))
                    result = await future
                finally:
                    self._running -= 1
                    worker.idle_since = time.monotonic()
                    if self._closed:
                        worker.jobs.put(None)
                    else:
                        self._idle.append(worker)
        return result

    def _take(self, loop: asyncio.AbstractEventLoop) -> _Worker:
        now = time.monotonic()
        while self._idle and now - self._idle[0].idle_since >= IDLE_SECONDS:
            self._idle.pop(0).jobs.put(None)
        if self._idle:
            return self._idle.pop()
        worker = _Worker(loop, next(self._names))
        worker.cpus = self._all_cpus  # inherited from the loop's thread, which is never pinned
        return worker

    def _place(self, worker: _Worker) -> None:
        if self._getcpu is None or self._all_cpus is None:
            return
        cpus = frozenset((self._getcpu(),)) if self._running == 0 else self._all_cpus
        if worker.cpus == cpus:
            return
        try:
            os.sched_setaffinity(worker.native_id, cpus)
        except OSError as exc:  # a CPU taken away (cpuset change) or a sandbox that forbids it
            logger.warning("tool threads stop following the event loop's CPU: %s", exc)
            self._getcpu = None
            return
        worker.cpus = cpus

    def close(self) -> None:
        """End idle workers now and busy ones when their tool returns; refuse new calls."""
        self._closed = True
        for worker in self._idle:
            worker.jobs.put(None)
        self._idle.clear()
