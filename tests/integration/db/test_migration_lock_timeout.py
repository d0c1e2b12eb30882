"""`DATABASE_MIGRATION_LOCK_TIMEOUT_SECONDS`: a migration that waits for a lock a running
transaction holds gives up, leaves the database as it was, and succeeds when run again.

A schema change queued for its lock holds up every query on the table behind it, so during a
rolling deploy waiting is worse than failing: the migration Job retries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg

from alembic import command
from service.cli_exit_codes import EXIT_LOCK_WAIT
from service.db.engine import libpq_url
from service.db.migrations import alembic_config, head_revision
from tests.integration.db.test_migrate_secrets_dir import REPO_ROOT, revision_of
from tests.support.databases import DatabaseTemplates

# The revision before the one that rebuilds `usage_record`'s indexes (DROP INDEX: an exclusive
# lock on the table).
BEFORE_USAGE_INDEXES = "1a593b8c6d6b"


def migrate(database_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DATABASE_MIGRATION_LOCK_TIMEOUT_SECONDS": "0.3",
        "PYTHONPATH": str(REPO_ROOT),
    }
    return subprocess.run(
        [sys.executable, "-m", "service", "migrate"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,  # it would wait for the lock for as long as the test holds it
    )


def test_a_migration_behind_a_running_transaction_gives_up_and_changes_nothing(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    database_url = pg_templates.empty_url(tmp_path)
    command.upgrade(alembic_config(database_url), BEFORE_USAGE_INDEXES)
    with psycopg.connect(libpq_url(database_url)) as reader:
        reader.execute("SELECT count(*) FROM usage_record")  # its transaction stays open

        stopped = migrate(database_url, tmp_path)

        assert stopped.returncode == EXIT_LOCK_WAIT, stopped.stderr
        assert "DATABASE_MIGRATION_LOCK_TIMEOUT_SECONDS" in stopped.stderr
        assert revision_of(database_url) == BEFORE_USAGE_INDEXES
        reader.rollback()

    done = migrate(database_url, tmp_path)

    assert done.returncode == 0, done.stderr
    assert revision_of(database_url) == head_revision(database_url)
