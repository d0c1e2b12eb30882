"""`create_app` leaves process-wide state alone; `serve`'s wrapper tunes the collector and sniffio."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager

import sniffio

from service.app import create_app
from service.compat.anyio import lean_task_factory
from service.process_tuning import ProcessTuning
from tests.support.servers import bound_socket, port_of, serve
from tests.support.service import make_settings, run_service


@contextmanager
def untuned_process() -> Iterator[tuple[tuple[int, int, int], int]]:
    """Python's own collector settings and no sniffio declaration, as a test process starts."""
    before = gc.get_threshold()
    assert sniffio.thread_local.name is None
    try:
        yield before, gc.get_freeze_count()
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
        sniffio.thread_local.name = None


def assert_untouched(threshold: tuple[int, int, int], frozen: int) -> None:
    assert gc.get_threshold() == threshold
    assert gc.get_freeze_count() == frozen
    assert sniffio.thread_local.name is None
    assert asyncio.get_running_loop().get_task_factory() is None


async def test_apps_started_and_stopped_in_one_process_touch_no_process_wide_state(database_url: str) -> None:
    with untuned_process() as (threshold, frozen):
        async with run_service(database_url, gc_gen0_threshold=12_345) as first, first.http() as http:
            assert (await http.get("/healthz")).status_code == 200
            assert_untouched(threshold, frozen)
        assert_untouched(threshold, frozen)
        async with AsyncExitStack() as both:
            for _ in range(2):
                running = await both.enter_async_context(run_service(database_url))
                http = await both.enter_async_context(running.http())
                assert (await http.get("/healthz")).status_code == 200
            assert_untouched(threshold, frozen)
        assert_untouched(threshold, frozen)


async def test_the_serve_wrapper_tunes_the_process_while_the_app_runs(database_url: str) -> None:
    with untuned_process() as (threshold, frozen):
        sock = bound_socket()
        # On explicitly: CI also runs the suite with ANYIO_WORKAROUNDS=false in the environment.
        settings = make_settings(
            database_url, port_of(sock), gc_gen0_threshold=12_345, anyio_workarounds=True
        )
        async with serve(ProcessTuning(create_app(settings), settings.tuning), sock):
            assert gc.get_freeze_count() > 10_000, "the start-up heap is out of the collector's walks"
            assert gc.get_threshold()[0] == 12_345
            assert sniffio.thread_local.name == "asyncio"
            assert sniffio.current_async_library() == "asyncio"
            assert asyncio.get_running_loop().get_task_factory() is lean_task_factory
        assert_untouched(threshold, frozen)


async def test_the_serve_wrapper_can_leave_the_collector_and_the_tasks_alone(database_url: str) -> None:
    with untuned_process() as (threshold, frozen):
        sock = bound_socket()
        settings = make_settings(database_url, port_of(sock), gc_freeze=False, anyio_workarounds=False)
        async with serve(ProcessTuning(create_app(settings), settings.tuning), sock):
            assert gc.get_threshold() == threshold
            assert gc.get_freeze_count() == frozen
            assert sniffio.thread_local.name == "asyncio"
            assert asyncio.get_running_loop().get_task_factory() is None
        assert_untouched(threshold, frozen)
