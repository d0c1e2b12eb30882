"""Alembic environment: the service's metadata, batch mode on SQLite, URL from settings."""

from __future__ import annotations

from logging.config import fileConfig

from sqlalchemy import engine_from_config, pool

from alembic import context
from service.db.engine import ensure_sqlite_directory, postgres_lock_timeout, sync_database_url
from service.db.migrations import LOCK_TIMEOUT_ATTRIBUTE
from service.db.models import metadata
from service.settings import Settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

if not config.get_main_option("sqlalchemy.url"):
    database_url = Settings().database.url
    ensure_sqlite_directory(database_url)
    config.set_main_option("sqlalchemy.url", sync_database_url(database_url).replace("%", "%%"))


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = engine_from_config(
        config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    lock_timeout_seconds = config.attributes.get(LOCK_TIMEOUT_ATTRIBUTE)
    with connectable.connect() as connection:
        if lock_timeout_seconds is not None and connection.dialect.name == "postgresql":
            # For the session; committed, so the migrations' transaction below is alembic's own.
            connection.exec_driver_sql(postgres_lock_timeout(lock_timeout_seconds))
            connection.commit()
        context.configure(
            connection=connection,
            target_metadata=metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    connectable.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
