"""Every engine of the service (the app's, the CLI's, its jobs') is made from the `DATABASE_*`
settings by one function, so none of them leaves one out."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from service.db.engine import create_engine_for
from service.settings.sections import DatabaseSettings


async def test_an_sqlite_engine_takes_synchronous_and_lock_timeout_from_settings(tmp_path: Path) -> None:
    settings = DatabaseSettings(
        url=f"sqlite:///{tmp_path / 'service.db'}", sqlite_synchronous="full", lock_timeout_seconds=0.25
    )
    engine = create_engine_for(settings)
    try:
        async with engine.connect() as connection:
            assert (await connection.execute(text("PRAGMA synchronous"))).scalar() == 2  # FULL
            assert (await connection.execute(text("PRAGMA busy_timeout"))).scalar() == 250
    finally:
        await engine.dispose()
