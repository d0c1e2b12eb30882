from __future__ import annotations

from pathlib import Path

from tests.support.databases import DatabaseTemplates
from tests.support.service import RunningService, run_service


async def test_healthz_and_readyz_when_all_is_well(service: RunningService) -> None:
    async with service.http() as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        ready = await http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"ready": True, "checks": {"database": "ok", "migrations": "ok"}}


async def test_readyz_fails_when_the_database_is_unreachable() -> None:
    # Nothing listens on port 1 of loopback: the connection is refused at once.
    async with run_service("postgresql://nobody@127.0.0.1:1/none") as running, running.http() as http:
        alive = await http.get("/healthz")
        ready = await http.get("/readyz")
    assert alive.status_code == 200
    assert ready.status_code == 503
    body = ready.json()
    assert body["ready"] is False
    assert body["checks"] == {"database": "unreachable"}, "a state, not the error's text"


async def test_readyz_fails_before_migrations(db_templates: DatabaseTemplates, tmp_path: Path) -> None:
    async with run_service(db_templates.empty_url(tmp_path)) as running, running.http() as http:
        ready = await http.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["migrations"] == "behind"


async def test_mcp_answers_401_with_a_dead_database() -> None:
    """A dead database must not turn token checks into 500s or, worse, into acceptance."""
    async with run_service("postgresql://nobody@127.0.0.1:1/none") as running, running.http() as http:
        response = await http.post("/mcp", headers={"Authorization": "Bearer mcp_pat_whatever"}, json={})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.json()["error"] == "service_unavailable"


async def test_pages_answer_503_with_a_dead_database() -> None:
    async with (
        run_service("postgresql://nobody@127.0.0.1:1/none") as running,
        running.http(cookies={"session": "whatever"}) as http,
    ):
        page = await http.get("/pay/el_anything")
    assert page.status_code == 503
    assert page.headers["retry-after"] == "5"
