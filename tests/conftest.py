"""Fixtures shared by every test: a fresh migrated database per test and a running service."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.databases import DatabaseTemplates, test_backend
from tests.support.service import RunningService, run_service


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


@pytest.fixture
def database_url(db_templates: DatabaseTemplates, tmp_path: Path) -> str:
    return db_templates.fresh_url(tmp_path)


@pytest.fixture
async def service(database_url: str) -> AsyncIterator[RunningService]:
    async with run_service(database_url) as running:
        yield running
