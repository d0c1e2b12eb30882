"""Workaround for anyio's cancelled-task reference cycle (docs/adr/0009-anyio-cancelled-task-cycle.md).

anyio's task groups give every child task a done callback that, for a cancelled child, keeps the
`CancelledError` from `task.exception()` in a local while the exception's traceback holds the
callback's own frame: a cycle reference counting cannot free. Through the traceback it also keeps
the child's whole stack (frames, locals, the ASGI `send` chain they closed over) until the cyclic
collector runs. The MCP SDK answers each legacy SSE `tools/call` through sse-starlette, which
cancels two such children per call: about 150 objects of garbage a call, which set how often, and
for how long, the collector pauses the server.

`lean_cancelled_tasks` sets the running loop's task factory (asyncio's public hook) to make
`LeanTask`s: asyncio tasks whose `exception()`, for a cancelled task, raises the same
`CancelledError` (same object, same message) without the traceback of the task's own stack, and
drops the caller's part of the traceback on the loop's next turn, once the caller has returned.
Nothing else about the task changes; a cancelled task's traceback is the only thing lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Generator, Iterator
from contextlib import contextmanager
from importlib.metadata import version
from typing import Any

logger = logging.getLogger(__name__)

# anyio versions the cycle was seen in and the workaround checked against; off on any other.
CHECKED_VERSIONS = frozenset({"4.16.0"})
# How far along `__context__` a cancelled task's tracebacks are dropped (chains are short).
MAX_CHAIN = 16


def anyio_version() -> str:
    return version("anyio")


def drop_tracebacks(error: BaseException) -> None:
    """Clear the traceback of `error` and of the exceptions it was raised while handling."""
    link: BaseException | None = error
    for _ in range(MAX_CHAIN):
        if link is None:
            return
        link.__traceback__ = None
        link = link.__context__


class LeanTask(asyncio.Task):  # type: ignore[type-arg]  # the factory makes tasks of any result
    def exception(self) -> BaseException | None:
        try:
            return super().exception()
        except asyncio.CancelledError as error:
            drop_tracebacks(error)
            # Re-raised, the error gains the caller's frame; dropped once the caller has returned.
            loop = self.get_loop()
            if not loop.is_closed():
                loop.call_soon(drop_tracebacks, error)
            raise


def lean_task_factory(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
    **kwargs: Any,
) -> asyncio.Future[Any]:
    return LeanTask(coro, loop=loop, **kwargs)


@contextmanager
def lean_cancelled_tasks(*, anyio: str | None = None) -> Iterator[bool]:
    """While the block runs, tasks the running loop creates are `LeanTask`s; yields whether they
    are. Nothing changes on an anyio version not in CHECKED_VERSIONS, or when the loop already
    has a task factory (someone else's choice)."""
    running = anyio or anyio_version()
    loop = asyncio.get_running_loop()
    if running not in CHECKED_VERSIONS:
        logger.info("anyio %s: cancelled tasks keep their stacks until the collector runs", running)
        yield False
        return
    if loop.get_task_factory() is not None:
        yield False
        return
    loop.set_task_factory(lean_task_factory)
    try:
        yield True
    finally:
        if loop.get_task_factory() is lean_task_factory:
            loop.set_task_factory(None)
