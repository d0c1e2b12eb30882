"""anyio's task groups, made to stop leaving a reference cycle behind every cancelled child task.

anyio 4.16 (the newest release) registers a `task_done` callback on each child task. For a
cancelled child it catches the `CancelledError` and keeps it in the local `exc`; the exception's
traceback holds `task_done`'s frame and that frame holds `exc`. Reference counting cannot free the
cycle, and through the traceback it keeps the child's whole stack alive: its frames, its locals,
the ASGI `send` chain they closed over. Only the cyclic collector frees it.

The MCP SDK answers every legacy `tools/call` with SSE through sse-starlette, whose response cancels
two helper tasks (keep-alive ping, shutdown listener) when the answer has gone out. Measured in
process (`gc.DEBUG_SAVEALL`): 127 objects per call on the bare SDK and 145 on ours, 17 of them
frames, all held by the two cycles; none with the fix. With the service's gen0 threshold of 10,000
that garbage piles up for some 70 calls, goes cold in the cache and is walked in one go: the
legacy SSE p99 of `make bench` at c=1 read 4.2-4.5 ms without the fix against 2.1-2.8 ms with it.

The fix wraps `task_done`'s body in `try: ... finally: exc = None`, so the frame lets go of the
exception when the callback returns: no cycle, and everything is freed on the spot. It is made from
anyio's own source at start-up (an AST edit of `TaskGroup._spawn`, compiled against the same
module), so it follows anyio's code rather than freezing a copy of it. It installs only when that
source has the shape it was written for (`installed_fix` yields False otherwise); remove this
module once anyio no longer keeps `exc` (tests/unit/test_anyio_cycle_fix.py notices).
"""

from __future__ import annotations
import __future__

import ast
import inspect
import logging
import textwrap
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from anyio._backends import _asyncio as anyio_asyncio

logger = logging.getLogger(__name__)

CALLBACK_NAME = "task_done"
CYCLIC_LOCAL = "exc"


def _callback_code(spawn: types.FunctionType) -> types.CodeType | None:
    for constant in spawn.__code__.co_consts:
        if isinstance(constant, types.CodeType) and constant.co_name == CALLBACK_NAME:
            return constant
    return None


def without_cycle(spawn: Callable[..., Any]) -> types.FunctionType | None:
    """`spawn` rebuilt with its nested `task_done` dropping `exc` on the way out; None when `spawn`
    is not the function this was written for (no `task_done`, `exc` not a plain local of it, a
    closure, no source to read)."""
    if not isinstance(spawn, types.FunctionType) or spawn.__closure__:
        return None
    callback = _callback_code(spawn)
    if callback is None or CYCLIC_LOCAL not in callback.co_varnames:
        return None
    try:
        source = textwrap.dedent(inspect.getsource(spawn))
        filename = inspect.getsourcefile(spawn) or spawn.__code__.co_filename
    except (OSError, TypeError):
        return None
    tree = ast.parse(source)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    definition = tree.body[0]
    nested = [
        node for node in definition.body if isinstance(node, ast.FunctionDef) and node.name == CALLBACK_NAME
    ]
    if len(nested) != 1:
        return None
    task_done = nested[0]
    release = ast.Assign(targets=[ast.Name(id=CYCLIC_LOCAL, ctx=ast.Store())], value=ast.Constant(value=None))
    guarded = ast.Try(body=task_done.body, handlers=[], orelse=[], finalbody=[release])
    task_done.body = [ast.copy_location(guarded, task_done.body[0])]
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, spawn.__code__.co_firstlineno - 1)
    flags = spawn.__code__.co_flags & __future__.annotations.compiler_flag
    code = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
    namespace: dict[str, Any] = {}
    exec(code, spawn.__globals__, namespace)  # noqa: S102 - anyio's own source, edited above
    rebuilt = namespace.get(spawn.__name__)
    if not isinstance(rebuilt, types.FunctionType):
        return None
    rebuilt.__qualname__ = spawn.__qualname__
    rebuilt.__module__ = spawn.__module__
    rebuilt.__doc__ = spawn.__doc__
    rebuilt.__wrapped__ = spawn  # type: ignore[attr-defined]  # inspect.unwrap finds anyio's own
    return rebuilt


class _Installation:
    """The one process-wide replacement, shared by every `installed_fix` block running at once (two
    services in one process, as the tests run replicas): installed by the first, undone by the last."""

    def __init__(self) -> None:
        self.users = 0
        self.original: Callable[..., Any] | None = None

    def enter(self) -> bool:
        task_group = anyio_asyncio.TaskGroup
        if self.users == 0:
            original = task_group.__dict__["_spawn"]
            rebuilt = without_cycle(original)
            if rebuilt is None:
                logger.info("anyio's TaskGroup._spawn has changed shape; the cancelled-task cycle fix is off")
                return False
            self.original = original
            task_group._spawn = rebuilt  # type: ignore[method-assign]
        self.users += 1
        return True

    def leave(self) -> None:
        self.users -= 1
        if self.users == 0 and self.original is not None:
            anyio_asyncio.TaskGroup._spawn = self.original  # type: ignore[method-assign]
            self.original = None


_installation = _Installation()


@contextmanager
def installed_fix() -> Iterator[bool]:
    """anyio's asyncio `TaskGroup._spawn` replaced by `without_cycle`'s rebuild while the block runs
    (and while any other such block does); yields whether it is installed."""
    if not _installation.enter():
        yield False
        return
    try:
        yield True
    finally:
        _installation.leave()
