"""`alembic upgrade head` on a fresh database of each backend, then models and migrations must agree."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from service.db.engine import sync_database_url
from service.db.migrations import head_revision
from service.db.models import metadata
from tests.support.databases import (
    create_postgres_database,
    drop_postgres_database,
    postgres_admin_url,
    with_database,
)

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(params=["sqlite", "postgres"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    name = create_postgres_database()
    try:
        yield with_database(postgres_admin_url(), name)
    finally:
        drop_postgres_database(name)


def alembic(database_url: str, *args: str) -> None:
    env = {**os.environ, "DATABASE_URL": database_url}
    subprocess.run(
        [sys.executable, "-m", "alembic", *args], cwd=REPO_ROOT, env=env, check=True, capture_output=True
    )


def schema_diff(database_url: str) -> list[object]:
    engine = create_engine(sync_database_url(database_url))
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, metadata))
    finally:
        engine.dispose()


def current(database_url: str) -> str | None:
    engine = create_engine(sync_database_url(database_url))
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def test_upgrade_head_matches_models(empty_database_url: str) -> None:
    alembic(empty_database_url, "upgrade", "head")
    assert current(empty_database_url) == head_revision(empty_database_url)
    assert schema_diff(empty_database_url) == []


def test_downgrade_to_base_and_back(empty_database_url: str) -> None:
    alembic(empty_database_url, "upgrade", "head")
    alembic(empty_database_url, "downgrade", "base")
    engine = create_engine(sync_database_url(empty_database_url))
    try:
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    finally:
        engine.dispose()
    alembic(empty_database_url, "upgrade", "head")
    assert schema_diff(empty_database_url) == []


def test_constraint_names_follow_the_convention(empty_database_url: str) -> None:
    alembic(empty_database_url, "upgrade", "head")
    engine = create_engine(sync_database_url(empty_database_url))
    try:
        inspector = inspect(engine)
        for table in metadata.sorted_tables:
            for fk in inspector.get_foreign_keys(table.name):
                assert fk["name"] and fk["name"].startswith(f"fk_{table.name}_"), fk
            for unique in inspector.get_unique_constraints(table.name):
                assert unique["name"] and unique["name"].startswith(f"uq_{table.name}_"), unique
    finally:
        engine.dispose()


def test_revision_files_are_date_prefixed() -> None:
    names = [path.name for path in (REPO_ROOT / "alembic" / "versions").glob("*.py")]
    assert names
    for name in names:
        assert name[:8].isdigit() and name[8] == "_", name
