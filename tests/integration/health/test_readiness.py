"""Readiness through a rolling deploy and a database outage.

The migration runs before the rollout, so replicas of the previous release must stay ready on a
database one revision ahead; a database behind the code is the only schema state that makes a
replica unready. A database that was reached and then stops answering makes the replica unready
only once READINESS_OUTAGE_GRACE_SECONDS have passed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import make_url, text

from service.db.migrations import head_revision, known_revisions
from tests.support.databases import DatabaseTemplates
from tests.support.service import RunningService, run_service
from tests.support.tcp_proxy import tcp_proxy


async def stamp(service: RunningService, revision: str) -> None:
    async with service.runtime.engine.begin() as connection:
        await connection.execute(text("UPDATE alembic_version SET version_num = :rev"), {"rev": revision})


async def test_a_database_ahead_of_the_code_is_ready(
    service: RunningService, caplog: pytest.LogCaptureFixture
) -> None:
    await stamp(service, "f00dfeedbeef")  # what the next release's migration leaves
    with caplog.at_level(logging.WARNING, logger="service.health.readiness"):
        async with service.http() as http:
            first = await http.get("/readyz")
            second = await http.get("/readyz")
    assert first.status_code == second.status_code == 200
    assert first.json()["checks"]["migrations"] == "ahead"  # the revision is in the log only
    warnings = [record for record in caplog.records if "f00dfeedbeef" in record.getMessage()]
    assert len(warnings) == 1  # said once, not at every probe


async def test_a_database_behind_the_code_is_not_ready(database_url: str) -> None:
    older = sorted(known_revisions(database_url) - {head_revision(database_url)})[0]
    async with run_service(database_url, readiness_cache_seconds=0) as service, service.http() as http:
        assert (await http.get("/readyz")).status_code == 200
        await stamp(service, older)
        answer = await http.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["checks"]["migrations"] == "behind"


@pytest.mark.postgres
@pytest.mark.parametrize(("grace", "status"), [(600.0, 200), (0.0, 503)])
async def test_an_outage_makes_the_replica_unready_only_after_the_grace(
    pg_templates: DatabaseTemplates, tmp_path: Path, grace: float, status: int
) -> None:
    url = make_url(pg_templates.fresh_url(tmp_path))
    assert url.host is not None and url.port is not None
    async with tcp_proxy(url.host, url.port) as proxy:
        proxied = url.set(port=proxy.port).render_as_string(hide_password=False)
        async with (
            run_service(proxied, readiness_outage_grace_seconds=grace, readiness_cache_seconds=0) as running,
            running.http() as http,
        ):
            assert (await http.get("/readyz")).status_code == 200
            proxy.cut()
            during = await http.get("/readyz")
    assert during.status_code == status
    assert during.json()["checks"]["database"] == "unreachable"
