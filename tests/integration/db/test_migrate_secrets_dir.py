"""`python -m service migrate` as the Kubernetes migration Job runs it: secrets only as files.

The database URL is in a file in SECRETS_DIR and nowhere in the environment; the migration must
reach that database (which the settings' development default would not be).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy

from service.db.engine import sync_database_url
from service.db.migrations import head_revision
from tests.support.databases import DatabaseTemplates

REPO_ROOT = Path(__file__).resolve().parents[3]


def revision_of(database_url: str) -> str | None:
    engine = sqlalchemy.create_engine(sync_database_url(database_url))
    try:
        with engine.connect() as connection:
            if not sqlalchemy.inspect(connection).has_table("alembic_version"):
                return None
            return connection.execute(sqlalchemy.text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()


def test_migrate_reads_the_database_url_from_secrets_dir(
    db_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    database_url = db_templates.empty_url(tmp_path)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "DATABASE_URL").write_text(database_url + "\n")
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env["SECRETS_DIR"] = str(secrets)

    migrate = subprocess.run(
        [sys.executable, "-m", "service", "migrate"],
        cwd=tmp_path,  # the development default, sqlite:///./var/service.db, would land here
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )

    assert migrate.returncode == 0, migrate.stderr
    assert revision_of(database_url) == head_revision(database_url)
    assert not (tmp_path / "var").exists()
