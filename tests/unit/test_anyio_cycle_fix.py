"""anyio's task groups with and without the cancelled-child cycle fix: what is left to the collector,
and that task groups behave the same with the fix in place."""

from __future__ import annotations

import gc
import inspect
import types
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import anyio.lowlevel
import pytest
from anyio._backends import _asyncio as anyio_asyncio

from service.anyio_cycle_fix import installed_fix, without_cycle


async def sleep_until_cancelled() -> None:
    await anyio.sleep(3600)


@contextmanager
def collector_held_back() -> Iterator[list[object]]:
    """Automatic collection off inside; on exit, what a full collection finds unreachable is put in
    the yielded list."""
    unreachable: list[object] = []
    gc.collect()
    gc.disable()
    try:
        yield unreachable
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        unreachable.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def frames_of(objects: list[object], function_name: str) -> list[types.FrameType]:
    return [o for o in objects if isinstance(o, types.FrameType) and o.f_code.co_name == function_name]


async def cancel_a_child() -> None:
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(sleep_until_cancelled)
        await anyio.lowlevel.checkpoint()
        task_group.cancel_scope.cancel()


async def test_stock_anyio_leaves_a_cancelled_childs_stack_to_the_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bug the fix is for. When this fails, anyio no longer makes the cycle: remove the fix."""
    stock = inspect.unwrap(anyio_asyncio.TaskGroup.__dict__["_spawn"])  # anyio's, even if a service runs
    monkeypatch.setattr(anyio_asyncio.TaskGroup, "_spawn", stock)
    with collector_held_back() as unreachable:
        await cancel_a_child()
    assert frames_of(unreachable, "sleep_until_cancelled"), "anyio no longer leaves the cycle"
    assert frames_of(unreachable, "task_done")


async def test_with_the_fix_a_cancelled_child_is_freed_without_the_collector() -> None:
    with installed_fix() as installed:
        assert installed
        with collector_held_back() as unreachable:
            await cancel_a_child()
    assert frames_of(unreachable, "sleep_until_cancelled") == []
    assert frames_of(unreachable, "task_done") == []


async def test_the_fix_is_anyios_own_function_edited_and_is_undone_on_exit() -> None:
    original = anyio_asyncio.TaskGroup.__dict__["_spawn"]
    with installed_fix():
        rebuilt = anyio_asyncio.TaskGroup.__dict__["_spawn"]
        assert rebuilt is not original
        # Tracebacks through it still point into anyio's file, at anyio's lines.
        assert rebuilt.__code__.co_filename == original.__code__.co_filename
        assert rebuilt.__code__.co_firstlineno == original.__code__.co_firstlineno
        assert rebuilt.__qualname__ == "TaskGroup._spawn"
        assert inspect.unwrap(rebuilt) is original
    assert anyio_asyncio.TaskGroup.__dict__["_spawn"] is original


def test_overlapping_blocks_share_one_fix_which_the_last_one_out_undoes() -> None:
    """Two services in one process start and stop in any order."""
    original = anyio_asyncio.TaskGroup.__dict__["_spawn"]
    first, second = installed_fix(), installed_fix()
    first.__enter__()
    rebuilt = anyio_asyncio.TaskGroup.__dict__["_spawn"]
    second.__enter__()
    assert anyio_asyncio.TaskGroup.__dict__["_spawn"] is rebuilt
    first.__exit__(None, None, None)
    assert anyio_asyncio.TaskGroup.__dict__["_spawn"] is rebuilt
    second.__exit__(None, None, None)
    assert anyio_asyncio.TaskGroup.__dict__["_spawn"] is original


async def test_task_groups_behave_the_same_with_the_fix() -> None:
    async def fail() -> None:
        raise ValueError("child failed")

    async def started_with(value: int, *, task_status: anyio.abc.TaskStatus[int]) -> None:
        task_status.started(value)
        await anyio.sleep(3600)

    async def never_started(*, task_status: anyio.abc.TaskStatus[int]) -> None:
        return None

    async def fail_beside_a_sleeper() -> None:
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(fail)
            task_group.start_soon(sleep_until_cancelled)

    with installed_fix():
        with pytest.raises(ExceptionGroup) as raised:
            await fail_beside_a_sleeper()
        assert [str(error) for error in raised.value.exceptions] == ["child failed"]

        async with anyio.create_task_group() as task_group:
            assert await task_group.start(started_with, 7) == 7
            with pytest.raises(RuntimeError, match=r"without calling task_status\.started"):
                await task_group.start(never_started)
            task_group.cancel_scope.cancel()

        with anyio.move_on_after(0.01) as scope:
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(sleep_until_cancelled)
        assert scope.cancelled_caught


def test_a_function_of_another_shape_is_left_alone() -> None:
    def no_callback(self: object) -> None:
        return None

    def callback_without_exc(self: object) -> None:
        def task_done(task: object) -> None:
            print(task)

        task_done(self)

    assert without_cycle(no_callback) is None
    assert without_cycle(callback_without_exc) is None
    assert without_cycle(len) is None
