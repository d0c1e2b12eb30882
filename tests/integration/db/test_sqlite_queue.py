"""SQLite: concurrent transactions queue for the engine's one connection instead of inside SQLite."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sqlalchemy import event, func
from sqlmodel import col, select

from service.audit.models import AuditEvent
from service.audit.service import AuditKind, record
from service.db.engine import create_engine, create_session_factory
from tests.support.databases import DatabaseTemplates


async def test_concurrent_sqlite_transactions_share_one_connection_and_all_commit(
    sqlite_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    engine = create_engine(sqlite_templates.fresh_url(tmp_path))
    opened: list[Any] = []
    event.listen(engine.sync_engine, "connect", lambda connection, _record: opened.append(connection))
    sessions = create_session_factory(engine)

    async def write(index: int) -> None:
        async with sessions() as session, session.begin():
            await record(session, AuditKind.ENTITLEMENT_CHANGED, user_id=f"queued-{index}")

    try:
        await asyncio.gather(*(write(index) for index in range(12)))
        async with sessions() as session:
            written = await session.exec(select(func.count()).where(col(AuditEvent.user_id).like("queued-%")))
            assert written.one() == 12
        # Each transaction would otherwise have opened its own connection and waited in SQLite's
        # busy handler, which sleeps up to 100 ms between tries while the lock sits free.
        assert len(opened) == 1
    finally:
        await engine.dispose()
