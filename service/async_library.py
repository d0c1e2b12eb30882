"""Tells sniffio, once, that the server's event loop thread runs asyncio.

anyio asks `sniffio.current_async_library()` which event loop is running on nearly every
operation (checkpoints, memory streams, task groups, events, worker-thread hops), many times per
legacy tool call through the MCP SDK. Undeclared, sniffio finds asyncio by looking it up in
`sys.modules` and asking `asyncio.current_task()` each time; a declared thread answers from a
thread-local, several times faster (docs/adr/0008-measured-choices.md).
`sniffio.thread_local.name` is sniffio's documented way for an event loop to declare itself (Trio
sets it on its own threads).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import sniffio


@contextmanager
def declared_asyncio() -> Iterator[None]:
    """Declare asyncio on the calling thread while the block runs, when it is asyncio that runs it
    and nobody has declared anything; otherwise change nothing."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    if not running or sniffio.thread_local.name is not None:
        yield
        return
    sniffio.thread_local.name = "asyncio"
    try:
        yield
    finally:
        sniffio.thread_local.name = None
