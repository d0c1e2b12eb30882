"""`declared_asyncio`: sniffio answers from the declaration inside the block, and only there."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
import sniffio

from service.async_library import declared_asyncio


async def test_the_loop_thread_is_declared_inside_the_block_only() -> None:
    assert sniffio.thread_local.name is None
    with declared_asyncio():
        assert sniffio.thread_local.name == "asyncio"
        assert sniffio.current_async_library() == "asyncio"
    assert sniffio.thread_local.name is None


async def test_anyio_works_declared_and_worker_threads_stay_undeclared() -> None:
    """anyio still finds its backend for tasks, events and thread hops; a worker thread, where no
    event loop runs, still gets sniffio's "no async library" answer."""

    def in_worker() -> str:
        try:
            return sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            return "none"

    async def signal(event: anyio.Event) -> None:
        await anyio.lowlevel.checkpoint()
        event.set()

    with declared_asyncio():
        done = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(signal, done)
            with anyio.fail_after(5):
                await done.wait()
        answer = await anyio.to_thread.run_sync(in_worker)
    assert answer == "none"


async def test_an_existing_declaration_is_left_as_it_was() -> None:
    sniffio.thread_local.name = "asyncio"
    try:
        with declared_asyncio():
            pass
        assert sniffio.thread_local.name == "asyncio", "not ours to clear"
    finally:
        sniffio.thread_local.name = None


def test_without_a_running_loop_nothing_is_declared() -> None:
    with declared_asyncio():
        assert sniffio.thread_local.name is None
        with pytest.raises(sniffio.AsyncLibraryNotFoundError):
            sniffio.current_async_library()
