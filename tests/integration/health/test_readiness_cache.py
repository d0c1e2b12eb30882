"""`/readyz` is public: probes share one check while it runs and reuse its report for a short while.

Database work is counted with an engine event, every statement the checks send; time is a clock
the test moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from service.db.engine import create_engine
from service.db.migrations import head_revision, known_revisions
from service.health.readiness import Readiness, ReadinessReport


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Statements:
    """How many statements the engine sent to the database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.count = 0
        event.listen(engine.sync_engine, "before_cursor_execute", self._counted)

    def _counted(self, *_: Any) -> None:
        self.count += 1


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    try:
        yield engine
    finally:
        await engine.dispose()


def readiness(engine: AsyncEngine, database_url: str, cache_seconds: float, clock: Clock) -> Readiness:
    return Readiness(
        engine,
        head=head_revision(database_url),
        known_revisions=known_revisions(database_url),
        outage_grace=0.0,
        cache_seconds=cache_seconds,
        clock=clock,
    )


async def stamp(engine: AsyncEngine, revision: str | None) -> None:
    async with engine.begin() as connection:
        await connection.execute(text("UPDATE alembic_version SET version_num = :rev"), {"rev": revision})


async def test_concurrent_probes_share_one_check(engine: AsyncEngine, database_url: str) -> None:
    clock = Clock()
    statements = Statements(engine)
    await readiness(engine, database_url, 0.0, clock).check()
    one_check = statements.count
    statements.count = 0
    # No reuse at all: only sharing the running check keeps this to one check's statements.
    shared = readiness(engine, database_url, 0.0, clock)

    reports = await asyncio.gather(*(shared.check() for _ in range(50)))

    assert one_check > 0
    assert statements.count == one_check, "fifty concurrent probes, one check"
    assert reports == [ReadinessReport(True, {"database": "ok", "migrations": "ok"})] * 50


async def test_a_report_is_reused_for_its_ttl_and_a_failure_shows_once_it_ends(
    engine: AsyncEngine, database_url: str
) -> None:
    older = sorted(known_revisions(database_url) - {head_revision(database_url)})[0]
    clock = Clock()
    statements = Statements(engine)
    probes = readiness(engine, database_url, 1.0, clock)

    assert (await probes.check()).ready
    await stamp(engine, older)
    before = statements.count
    clock.now += 0.9
    assert (await probes.check()).ready, "within the TTL: the report of the last check"
    assert statements.count == before, "and no database work"

    clock.now += 0.1
    failed = await probes.check()
    assert failed == ReadinessReport(False, {"database": "ok", "migrations": "behind"})

    await stamp(engine, head_revision(database_url))
    clock.now += 0.9
    assert not (await probes.check()).ready, "the failure is reused for the TTL too"
    clock.now += 0.1
    assert (await probes.check()).ready, "and for no longer"


async def test_a_probe_that_gives_up_leaves_the_shared_check_to_the_others(
    engine: AsyncEngine, database_url: str
) -> None:
    started = asyncio.Event()
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *_: started.set())
    shared = readiness(engine, database_url, 0.0, Clock())
    leaving = asyncio.ensure_future(shared.check())
    staying = asyncio.ensure_future(shared.check())
    await started.wait()  # the check runs, and both probes wait for it

    leaving.cancel()  # its client went away

    assert (await staying).ready
    assert leaving.cancelled()
