"""`ToolThreads`: sync tools run off the loop, as `anyio.to_thread.run_sync` runs them, and a lone
call's worker is placed on the loop's CPU while overlapping calls' workers may use every CPU."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Iterator

import anyio
import anyio.from_thread
import pytest
import sniffio

from service.async_library import declared_asyncio
from service.tool_threads import ToolThreads

request_label: contextvars.ContextVar[str] = contextvars.ContextVar("request_label", default="unset")
linux_only = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="thread affinity is a Linux feature"
)


@pytest.fixture
def threads() -> Iterator[ToolThreads]:
    pool = ToolThreads(follow_loop_cpu=True)
    yield pool
    pool.close()


async def test_runs_the_function_in_another_thread_with_the_callers_context(
    threads: ToolThreads,
) -> None:
    request_label.set("call-7")
    loop_thread = threading.get_ident()

    def tool() -> tuple[int, str]:
        return threading.get_ident(), request_label.get()

    thread_id, label = await threads.run_sync(tool)
    assert thread_id != loop_thread
    assert label == "call-7"


async def test_the_tools_exception_reaches_the_caller_and_the_worker_is_reused(
    threads: ToolThreads,
) -> None:
    def broken() -> None:
        raise ValueError("no such chart")

    with pytest.raises(ValueError, match="no such chart"):
        await threads.run_sync(broken)
    first = await threads.run_sync(threading.get_ident)
    second = await threads.run_sync(threading.get_ident)
    assert first == second  # one call at a time: the same idle worker every time


async def test_inside_the_thread_no_event_loop_is_declared_and_from_thread_reaches_the_loop(
    threads: ToolThreads,
) -> None:
    loop_thread = threading.get_ident()

    def tool() -> tuple[str, int]:
        try:
            library = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            library = "none"
        return library, anyio.from_thread.run_sync(threading.get_ident)

    with declared_asyncio():
        library, ran_on = await threads.run_sync(tool)
    assert library == "none"
    assert ran_on == loop_thread


async def test_a_cancelled_caller_waits_for_its_tool_to_return(threads: ToolThreads) -> None:
    started, release = threading.Event(), threading.Event()
    events: list[str] = []
    scope = anyio.CancelScope()

    def slow_tool() -> str:
        started.set()
        release.wait(10)
        events.append("tool returned")
        return "chart"

    async def caller() -> None:
        with scope:
            # As with anyio.to_thread.run_sync: the result still comes back, and the cancellation
            # lands at the caller's next checkpoint.
            events.append(await threads.run_sync(slow_tool))
        events.append("caller returned")

    async with anyio.create_task_group() as group:
        group.start_soon(caller)
        await anyio.to_thread.run_sync(started.wait, 10)
        scope.cancel()
        for _ in range(10):  # an unshielded wait would have ended at the first of these
            await anyio.lowlevel.checkpoint()
        assert events == []
        release.set()
    assert events == ["tool returned", "chart", "caller returned"]


async def test_after_close_new_calls_are_refused() -> None:
    pool = ToolThreads()
    assert await pool.run_sync(lambda: 3) == 3
    pool.close()
    with pytest.raises(RuntimeError, match="shutting down"):
        await pool.run_sync(lambda: 4)


@linux_only
async def test_a_lone_call_runs_on_one_cpu_and_overlapping_calls_may_use_all(
    threads: ToolThreads,
) -> None:
    everything = os.sched_getaffinity(0)
    assert threads.follows_loop_cpu

    lone = await threads.run_sync(lambda: os.sched_getaffinity(0))
    assert len(lone) == 1 and lone <= everything

    first_running, release = threading.Event(), threading.Event()

    def held() -> set[int]:
        first_running.set()
        release.wait(10)
        return os.sched_getaffinity(0)

    async def second() -> set[int]:
        await anyio.to_thread.run_sync(first_running.wait, 10)
        try:
            return await threads.run_sync(lambda: os.sched_getaffinity(0))
        finally:
            release.set()

    held_cpus, overlapping = await asyncio.gather(threads.run_sync(held), second())
    assert len(held_cpus) == 1  # it started alone
    assert overlapping == everything


@linux_only
async def test_without_following_the_workers_keep_the_process_affinity() -> None:
    pool = ToolThreads(follow_loop_cpu=False)
    try:
        assert not pool.follows_loop_cpu
        assert await pool.run_sync(lambda: os.sched_getaffinity(0)) == os.sched_getaffinity(0)
    finally:
        pool.close()
