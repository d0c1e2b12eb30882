"""The collector is tuned and anyio's task groups mended while the service runs; both undone when it stops."""

from __future__ import annotations

import gc

from anyio._backends import _asyncio as anyio_asyncio

from tests.support.service import run_service


async def test_the_running_service_freezes_its_start_up_heap_and_restores_the_collector(
    database_url: str,
) -> None:
    before = gc.get_threshold()
    async with run_service(database_url, gc_gen0_threshold=12_345) as running, running.http() as http:
        assert (await http.get("/healthz")).status_code == 200
        assert gc.get_freeze_count() > 10_000, "the start-up heap is out of the collector's walks"
        assert gc.get_threshold()[0] == 12_345
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


async def test_gc_tuning_can_be_turned_off(database_url: str) -> None:
    before = gc.get_threshold()
    async with run_service(database_url, gc_freeze=False) as running, running.http() as http:
        assert (await http.get("/healthz")).status_code == 200
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == before


async def test_the_running_service_rebuilds_anyios_spawn_and_puts_it_back(database_url: str) -> None:
    original = anyio_asyncio.TaskGroup.__dict__["_spawn"]
    async with run_service(database_url) as running, running.http() as http:
        assert (await http.get("/healthz")).status_code == 200
        assert anyio_asyncio.TaskGroup.__dict__["_spawn"] is not original
    assert anyio_asyncio.TaskGroup.__dict__["_spawn"] is original
    async with run_service(database_url, anyio_cycle_fix=False) as running, running.http() as http:
        assert (await http.get("/healthz")).status_code == 200
        assert anyio_asyncio.TaskGroup.__dict__["_spawn"] is original
