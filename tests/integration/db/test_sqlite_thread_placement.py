"""SQLite's connection thread runs each statement on the CPU the event loop hands it over from
(`service/db/engine.py`), and keeps the process's CPUs when that is turned off."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from service.db.engine import create_engine

linux_only = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="thread affinity is a Linux feature"
)


def _affinity_here() -> str:
    """Called by SQLite inside a statement: the CPUs the thread running it may use."""
    return ",".join(str(cpu) for cpu in sorted(os.sched_getaffinity(0)))


async def _cpus_seen_by_statements(tmp_path: Path, *, follow: bool, statements: int) -> list[set[int]]:
    engine = create_engine(f"sqlite:///{tmp_path / 'placement.db'}", sqlite_thread_follows_loop_cpu=follow)

    @event.listens_for(engine.sync_engine, "connect")
    def add_function(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.create_function("affinity_here", 0, _affinity_here)

    try:
        seen: list[set[int]] = []
        async with engine.connect() as connection:
            for _ in range(statements):
                value = (await connection.execute(text("SELECT affinity_here()"))).scalar_one()
                seen.append({int(cpu) for cpu in value.split(",")})
        return seen
    finally:
        await engine.dispose()


@linux_only
async def test_statements_run_on_one_cpu_when_following_the_loop(tmp_path: Path) -> None:
    everything = os.sched_getaffinity(0)
    seen = await _cpus_seen_by_statements(tmp_path, follow=True, statements=20)
    assert all(len(cpus) == 1 and cpus <= everything for cpus in seen)


@linux_only
async def test_statements_keep_the_process_cpus_when_not_following(tmp_path: Path) -> None:
    everything = os.sched_getaffinity(0)
    seen = await _cpus_seen_by_statements(tmp_path, follow=False, statements=5)
    assert all(cpus == everything for cpus in seen)
