"""The cyclic garbage collector's pauses in a server process, read by the bench around a window.

A server started with BENCH_GC_PROBE=<path> counts each collection (`gc.callbacks`: start and
stop of every generation's pass) and, on SIGUSR1, writes its running totals to <path> as JSON,
replaced atomically, with a sequence number. `Server.gc_reading()` in `bench/procs.py` sends the
signal and waits (bounded) for the new sequence number. The callback adds a clock read and a few
additions to each collection, nothing to a call that collects nothing.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

ENV = "BENCH_GC_PROBE"


class GcPauses:
    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.pause_ms = [0.0, 0.0, 0.0]
        self.longest_since_read_ms = 0.0
        self._started = 0.0

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = int(info["generation"])
        pause = (time.perf_counter() - self._started) * 1000
        self.collections[generation] += 1
        self.pause_ms[generation] += pause
        self.longest_since_read_ms = max(self.longest_since_read_ms, pause)

    def read(self) -> dict[str, Any]:
        """Running totals, and the longest pause since the last read (then forgotten)."""
        longest, self.longest_since_read_ms = self.longest_since_read_ms, 0.0
        return {
            "collections": list(self.collections),
            "pause_ms": list(self.pause_ms),
            "longest_since_read_ms": longest,
        }


def install_from_environment() -> None:
    """In a server process (main thread, before serving): install the probe if BENCH_GC_PROBE names a file."""
    target = os.environ.get(ENV)
    if not target:
        return
    path = Path(target)
    pauses = GcPauses()
    gc.callbacks.append(pauses.callback)
    sequence = itertools.count(1)

    def write(_signum: int, _frame: FrameType | None) -> None:
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps({"seq": next(sequence), "at": time.perf_counter(), **pauses.read()}))
        os.replace(scratch, path)

    signal.signal(signal.SIGUSR1, write)


def between(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """What the collector did between two consecutive readings: collections, full ones, pause
    time and its share of the wall time between them, and the longest pause."""
    wall_ms = (after["at"] - before["at"]) * 1000
    pause_ms = sum(after["pause_ms"]) - sum(before["pause_ms"])
    return {
        "collections": sum(after["collections"]) - sum(before["collections"]),
        "full": after["collections"][2] - before["collections"][2],
        "pause_ms": pause_ms,
        "share": pause_ms / wall_ms if wall_ms > 0 else 0.0,
        "longest_ms": float(after["longest_since_read_ms"]),
    }
