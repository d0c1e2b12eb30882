"""Alembic, driven from code: `python -m service migrate`, `make migrate` and `/readyz` use this."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from alembic import command
from service.db.engine import ensure_sqlite_directory, sync_database_url


def _scripts_directory() -> Path:
    """Alembic's env.py and versions/: inside the installed package, or a checkout's `alembic/`."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "migrations"  # where the wheel puts the repository's alembic/
    return packaged if packaged.is_dir() else package.parent / "alembic"


ALEMBIC_DIR = _scripts_directory()


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(ALEMBIC_DIR))
    # ConfigParser interpolation treats % specially; URL-encoded passwords contain it.
    config.set_main_option("sqlalchemy.url", sync_database_url(database_url).replace("%", "%%"))
    return config


# Where `alembic/env.py` finds the lock timeout of a migration run in the config's attributes.
LOCK_TIMEOUT_ATTRIBUTE = "lock_timeout_seconds"


def upgrade_to_head(database_url: str, *, lock_timeout_seconds: float | None = None) -> None:
    """Every migration not applied yet. With `lock_timeout_seconds`, a statement on PostgreSQL that
    waits longer for a lock fails the run (psycopg's `LockNotAvailable`), which is rolled back."""
    ensure_sqlite_directory(database_url)
    config = alembic_config(database_url)
    if lock_timeout_seconds is not None:
        config.attributes[LOCK_TIMEOUT_ATTRIBUTE] = lock_timeout_seconds
    command.upgrade(config, "head")


def head_revision(database_url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()


def known_revisions(database_url: str) -> set[str]:
    """Every revision this code's migrations know, head and ancestors."""
    scripts = ScriptDirectory.from_config(alembic_config(database_url))
    return {script.revision for script in scripts.walk_revisions()}


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as connection:
        return await revision_on(connection)


async def revision_on(connection: AsyncConnection) -> str | None:
    """The database's Alembic revision, read on a connection the caller already holds."""
    return await connection.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())
