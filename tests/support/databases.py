"""Per-test databases on SQLite or PostgreSQL, each copied from one migrated template.

TEST_DATABASE=postgres selects PostgreSQL at TEST_POSTGRES_URL (default: the local server with
trust auth). Copying a migrated template keeps each test isolated without re-running migrations.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from service.db.migrations import upgrade_to_head

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DROP_CONCURRENCY = 8
TEMPLATE_FIXTURES = {"sqlite": "sqlite_templates", "postgres": "pg_templates"}
"""Each backend's template fixture, for tests that run on both whatever TEST_DATABASE says."""


def test_backend() -> str:
    return os.environ.get("TEST_DATABASE", "sqlite")


def postgres_admin_url() -> str:
    return os.environ.get("TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


@contextmanager
def postgres_admin() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(_libpq(postgres_admin_url()), autocommit=True, connect_timeout=5) as connection:
        yield connection


def create_postgres_database(template: str | None = None) -> str:
    name = f"svc_test_{secrets.token_hex(6)}"
    with postgres_admin() as admin:
        if template:
            admin.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            )
        else:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name


def drop_postgres_database(name: str) -> None:
    with postgres_admin() as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


class DatabaseTemplates:
    """Creates the migrated template lazily, hands out copies, and cleans everything up."""

    def __init__(self, backend: str, workdir: Path) -> None:
        self.backend = backend
        self.workdir = workdir
        self._template: str | None = None
        self._created: list[str] = []
        self._dropping = ThreadPoolExecutor(DROP_CONCURRENCY, thread_name_prefix="drop-database")
        self._drops: list[Future[None]] = []

    def _ensure_template(self) -> str:
        if self._template is None:
            if self.backend == "postgres":
                name = create_postgres_database()
                self._created.append(name)
                upgrade_to_head(with_database(postgres_admin_url(), name))
                self._template = name
            else:
                path = self.workdir / "template.db"
                upgrade_to_head(f"sqlite:///{path}")
                self._template = str(path)
        return self._template

    def fresh_url(self, tmp_path: Path) -> str:
        template = self._ensure_template()
        if self.backend == "postgres":
            name = create_postgres_database(template)
            self._created.append(name)
            return with_database(postgres_admin_url(), name)
        target = tmp_path / "service.db"
        shutil.copyfile(template, target)
        return f"sqlite:///{target}"

    def empty_url(self, tmp_path: Path) -> str:
        """An unmigrated database of the selected backend."""
        if self.backend == "postgres":
            name = create_postgres_database()
            self._created.append(name)
            return with_database(postgres_admin_url(), name)
        return f"sqlite:///{tmp_path / 'empty.db'}"

    def discard(self, url: str) -> None:
        """Drops the copy at `url`, which nothing uses any more, while the next tests run: the
        server mostly waits on removing files, so drops left to the end of the run held up each
        worker's last test by tens of seconds."""
        name = make_url(url).database
        if self.backend == "postgres" and name in self._created:
            self._created.remove(name)
            self._drops.append(self._dropping.submit(drop_postgres_database, name))

    def close(self) -> None:
        """Drops the rest of the databases this run made, several at a time."""
        with self._dropping as pool:
            list(pool.map(drop_postgres_database, self._created))
        for dropped in self._drops:
            dropped.result()  # a drop that failed in the background fails the run here
