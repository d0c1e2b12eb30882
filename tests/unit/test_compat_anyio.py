"""`lean_cancelled_tasks` (service/compat/anyio.py): a cancelled task group child's stack goes with
the group, not with the next collection, and anyio's cancellation semantics stay as they were."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import anyio
import pytest

from service.compat.anyio import CHECKED_VERSIONS, anyio_version, lean_cancelled_tasks, lean_task_factory


class Marker:
    """Something a child task's frame holds, so a weak reference tells whether the frame is gone."""


@contextmanager
def collector_off() -> Iterator[None]:
    """Only reference counting frees anything inside; what a cycle holds stays until `gc.collect`."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def next_turns(count: int = 2) -> None:
    """Let the loop run what is already scheduled (each `sleep(0)` is one turn, not a wait)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def cancelled_child_marker() -> weakref.ref[Marker]:
    """A task group whose child is cancelled while it waits, holding a `Marker` in its frame."""
    ready = anyio.Event()
    marker_ref: list[weakref.ref[Marker]] = []

    async def child() -> None:
        held = Marker()
        marker_ref.append(weakref.ref(held))
        ready.set()
        await anyio.sleep_forever()

    async with anyio.create_task_group() as group:
        group.start_soon(child)
        await ready.wait()
        group.cancel_scope.cancel()
    await next_turns()
    return marker_ref[0]


async def test_anyio_still_keeps_a_cancelled_childs_stack_in_a_cycle() -> None:
    """Why the workaround exists. When this fails, anyio frees the stack by itself: remove
    service/compat/anyio.py and its setting, and mark ADR 0009 superseded."""
    assert asyncio.get_running_loop().get_task_factory() is None
    with collector_off():
        marker = await cancelled_child_marker()
        assert marker() is not None, "the child's frame is kept by the callback's cycle"
        gc.collect()
        assert marker() is None


async def test_with_lean_tasks_a_cancelled_childs_stack_goes_with_its_group() -> None:
    assert anyio_version() in CHECKED_VERSIONS
    with collector_off(), lean_cancelled_tasks() as lean:
        assert lean and asyncio.get_running_loop().get_task_factory() is lean_task_factory
        marker = await cancelled_child_marker()
        assert marker() is None, "the child's frame went with the group, by reference counting"
    assert asyncio.get_running_loop().get_task_factory() is None


async def test_a_lean_task_raises_its_own_cancelled_error_without_the_stack() -> None:
    with lean_cancelled_tasks():
        task = asyncio.create_task(asyncio.sleep(3600))
        await asyncio.sleep(0)
        task.cancel("no longer needed")
        await asyncio.wait([task])
    with pytest.raises(asyncio.CancelledError, match="no longer needed") as raised:
        task.exception()
    error = raised.value
    assert error.__traceback__ is not None  # the part from `exception()` up, until the next turn
    await next_turns()
    assert error.__traceback__ is None
    assert task.cancelled()


async def test_a_finished_or_failed_lean_task_answers_as_any_task() -> None:
    async def fail() -> None:
        raise ValueError("bad")

    with lean_cancelled_tasks():
        done = asyncio.create_task(asyncio.sleep(0, result=7))
        failed = asyncio.create_task(fail())
        await asyncio.wait([done, failed])
    assert done.exception() is None and done.result() == 7
    error = failed.exception()
    assert isinstance(error, ValueError) and error.__traceback__ is not None


LeanOrNot = Callable[[], AbstractContextManager[Any]]
BOTH: list[LeanOrNot] = [nullcontext, lean_cancelled_tasks]


@pytest.fixture(params=BOTH, ids=["asyncio tasks", "lean tasks"])
async def tasks(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    with request.param():
        yield


@pytest.mark.usefixtures("tasks")
async def test_a_cancel_scope_still_swallows_its_own_cancellation_of_an_awaited_task() -> None:
    waiting = asyncio.create_task(asyncio.sleep(3600))
    with anyio.move_on_after(0) as scope:
        await waiting
    assert scope.cancelled_caught
    await asyncio.wait([waiting])
    assert waiting.cancelled()


@pytest.mark.usefixtures("tasks")
async def test_a_child_cancelled_before_it_started_still_cancels_only_its_scope() -> None:
    async def never_starts(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        await anyio.sleep_forever()

    with anyio.move_on_after(0) as scope:
        async with anyio.create_task_group() as group:
            await group.start(never_starts)
    assert scope.cancelled_caught


@pytest.mark.usefixtures("tasks")
async def test_a_failing_child_still_fails_its_group_and_cancels_its_sibling() -> None:
    sibling_cancelled = anyio.Event()

    async def sibling() -> None:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            sibling_cancelled.set()
            raise

    async def failing() -> None:
        await anyio.lowlevel.checkpoint()
        raise ValueError("child failed")

    async def run_both() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(sibling)
            group.start_soon(failing)

    with pytest.raises(ExceptionGroup) as raised:
        await run_both()
    assert raised.group_contains(ValueError, match="child failed")
    assert sibling_cancelled.is_set()


async def test_nothing_changes_on_an_anyio_version_it_was_not_checked_on() -> None:
    loop = asyncio.get_running_loop()
    with lean_cancelled_tasks(anyio="99.0.0") as lean:
        assert not lean
        assert loop.get_task_factory() is None


async def test_a_task_factory_already_set_is_left_in_place() -> None:
    loop = asyncio.get_running_loop()

    def theirs(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(theirs)
    try:
        with lean_cancelled_tasks() as lean:
            assert not lean
            assert loop.get_task_factory() is theirs
        assert loop.get_task_factory() is theirs
    finally:
        loop.set_task_factory(None)
