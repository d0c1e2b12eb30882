"""Waking a helper thread on the CPU the event loop runs on.

On the 2-vCPU cloud VMs this service is measured on, Linux wakes a waiting thread on the other,
idle vCPU, and waking an idle vCPU is a trip through the hypervisor: a hand-off to a thread and
back costs ~100-350 us there (depending on the machine's phase) against ~40-120 us when both
threads share one CPU. The event loop hands work to two kinds of thread: sync tools
(`service/tool_threads.py`) and, on SQLite, aiosqlite's connection thread, which runs every
statement, BEGIN and COMMIT.

The waker, not the woken thread, must move it (a thread that moved itself would already have been
woken on the far CPU), and only the helper is ever pinned: the loop's thread stays free, so the
kernel still balances it, and the helper follows it at its next hand-off.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable

logger = logging.getLogger(__name__)


def sched_getcpu() -> Callable[[], int] | None:
    """glibc's and musl's `sched_getcpu` (a vDSO read, no system call), or None without one."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = []
    return function


class FollowsWaker:
    """Keeps one thread on the CPU of whoever calls `before_wake`: one `sched_setaffinity` when
    that CPU changed since the last call, otherwise one vDSO read."""

    def __init__(self, native_id: int, getcpu: Callable[[], int]) -> None:
        self._native_id = native_id
        self._getcpu: Callable[[], int] | None = getcpu
        self._cpu = -1

    @classmethod
    def for_thread(cls, native_id: int | None) -> FollowsWaker | None:
        """None where the OS offers no thread affinity, or the thread has not started."""
        getcpu = sched_getcpu()
        if getcpu is None or native_id is None:
            return None
        return cls(native_id, getcpu)

    def before_wake(self) -> None:
        if self._getcpu is None:
            return
        cpu = self._getcpu()
        if cpu == self._cpu:
            return
        try:
            os.sched_setaffinity(self._native_id, (cpu,))
        except OSError as exc:  # a CPU taken away (cpuset change), a sandbox that forbids it, a thread gone
            logger.info("thread %d stops following the event loop's CPU: %s", self._native_id, exc)
            self._getcpu = None
            return
        self._cpu = cpu
