"""Fixtures shared by every test: a fresh migrated database per test and a running service."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.databases import DatabaseTemplates, test_backend
from tests.support.service import RunningService, run_service


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With TEST_DATABASE=postgres, run only the tests whose database it chooses: those whose
    fixtures reach `db_templates`. The others (unit tests, the sandbox, tests that pick SQLite or
    PostgreSQL themselves) would run exactly as in the default suite, which runs every test."""
    if test_backend() != "postgres":
        return
    kept = [item for item in items if "db_templates" in getattr(item, "fixturenames", ())]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.fixture(scope="session")
def db_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatabaseTemplates]:
    templates = DatabaseTemplates(test_backend(), tmp_path_factory.mktemp("db-template"))
    yield templates
    templates.close()


@pytest.fixture(scope="session")
def pg_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatabaseTemplates]:
    """PostgreSQL whatever TEST_DATABASE says, for what only happens with concurrent writers."""
    templates = DatabaseTemplates("postgres", tmp_path_factory.mktemp("pg-template"))
    yield templates
    templates.close()


@pytest.fixture(scope="session")
def sqlite_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatabaseTemplates]:
    """SQLite whatever TEST_DATABASE says, for what is SQLite's alone."""
    templates = DatabaseTemplates("sqlite", tmp_path_factory.mktemp("sqlite-template"))
    yield templates
    templates.close()


@pytest.fixture
def database_url(db_templates: DatabaseTemplates, tmp_path: Path) -> Iterator[str]:
    url = db_templates.fresh_url(tmp_path)
    yield url
    db_templates.discard(url)


@pytest.fixture
async def service(database_url: str) -> AsyncIterator[RunningService]:
    async with run_service(database_url) as running:
        yield running
