"""The garbage collector, set for a long-running server whose heap is mostly start-up objects.

A started service holds a large heap of container objects (SQLAlchemy, pydantic, stripe, the MCP
SDK) that live until shutdown. CPython's cyclic collector walks all of them on every full
collection, and with the default gen0 threshold (700 allocations) a tool call triggers a young
collection every couple of calls, so a large share of a paid tool call's CPU went to the collector.
Freezing the start-up heap moves it out of the collector's sight, and a larger gen0 threshold makes
young collections rare (docs/adr/0008-measured-choices.md).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def tuned_gc(gen0_threshold: int) -> Iterator[None]:
    """Freeze what exists now and raise the gen0 threshold (0 keeps it); undone on exit."""
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    if gen0_threshold:
        gc.set_threshold(gen0_threshold, *previous[1:])
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()
