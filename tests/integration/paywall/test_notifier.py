"""One legacy client that stopped reading must not hold back another session's completion notice."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError
from sqlmodel import select

from service.audit.models import AuditEvent
from service.db.engine import create_engine, create_session_factory
from service.db.metadata import utcnow
from service.identity import service as identity
from service.paywall.models import Elicitation, ElicitationDelivery, ElicitationStatus
from service.paywall.notifier import SessionNotifier
from tests.support.service import DEFAULT_PASSWORD, cheap_password_hashing


class StuckClient:
    """A session whose client never reads again: the send never returns."""

    async def send_elicit_complete(self, elicitation_id: str) -> None:
        await asyncio.Event().wait()


class ReadingClient:
    def __init__(self) -> None:
        self.received: list[str] = []

    async def send_elicit_complete(self, elicitation_id: str) -> None:
        self.received.append(elicitation_id)


async def completed_elicitations(sessions: Any, username: str, owed: dict[str, str]) -> None:
    """A user whose elicitations (id -> the MCP session that asked) are completed, notices owed."""
    async with sessions() as session, session.begin():
        user = await identity.create_user(session, username, DEFAULT_PASSWORD, cheap_password_hashing())
        for elicitation_id, mcp_session in owed.items():
            session.add(
                Elicitation(
                    id=elicitation_id,
                    user_id=user.id,
                    plan_id=f"plan-{elicitation_id}",
                    tool_name="ascii_chart",
                    mcp_session_id=mcp_session,
                    protocol_era="2025-11-25",
                    status=ElicitationStatus.COMPLETED.value,
                    expires_at=utcnow() + timedelta(hours=1),
                    completed_at=utcnow(),
                )
            )
            await session.flush()
            session.add(ElicitationDelivery(elicitation_id=elicitation_id, mcp_session_id=mcp_session))


async def test_a_stuck_session_does_not_hold_back_the_others(database_url: str) -> None:
    engine = create_engine(database_url)
    sessions = create_session_factory(engine)
    try:
        await completed_elicitations(sessions, "notified", {"eli_stuck": "sess-stuck", "eli_ok": "sess-ok"})
        notifier = SessionNotifier(sessions, hold_for=3600, send_timeout=0.5)
        reading = ReadingClient()
        notifier.hold("sess-stuck", StuckClient())
        notifier.hold("sess-ok", reading)

        async with asyncio.timeout(20):  # a bound for the test itself, far above the send timeout
            sent = await notifier.deliver(("eli_stuck", "eli_ok"))

        assert reading.received == ["eli_ok"]
        assert sent == 1
        assert "sess-stuck" not in notifier.held_session_ids
        async with sessions() as session:
            stuck = await session.get(ElicitationDelivery, ("eli_stuck", "sess-stuck"))
            ok = await session.get(ElicitationDelivery, ("eli_ok", "sess-ok"))
        assert stuck is not None and stuck.delivered_at is None
        assert ok is not None and ok.delivered_at is not None
    finally:
        await engine.dispose()


async def test_a_session_the_change_names_hears_before_any_database_work() -> None:
    engine = create_engine("postgresql://nobody@127.0.0.1:1/gone")  # nothing listens there
    notifier = SessionNotifier(create_session_factory(engine), hold_for=3600)
    reading = ReadingClient()
    notifier.hold("sess-1", reading)
    try:
        with pytest.raises(OperationalError):
            await notifier.deliver(("eli_1",), known=(("eli_1", "sess-1"), ("eli_1", "sess-elsewhere")))
    finally:
        await engine.dispose()
    assert reading.received == ["eli_1"]


async def test_each_notice_is_sent_once_and_recorded(database_url: str) -> None:
    engine = create_engine(database_url)
    sessions = create_session_factory(engine)
    try:
        await completed_elicitations(sessions, "once", {"eli_once": "sess-once"})
        notifier = SessionNotifier(sessions, hold_for=3600)
        reading = ReadingClient()
        notifier.hold("sess-once", reading)
        assert await notifier.deliver(("eli_once",), known=(("eli_once", "sess-once"),)) == 1
        assert await notifier.deliver(("eli_once",), known=(("eli_once", "sess-once"),)) == 0
        assert await notifier.sweep() == 0
        assert reading.received == ["eli_once"]
        async with sessions() as session:
            row = await session.get(ElicitationDelivery, ("eli_once", "sess-once"))
            audits = (
                await session.exec(select(AuditEvent).where(AuditEvent.kind == "completion_delivered"))
            ).all()
        assert row is not None and row.delivered_at is not None
        assert len(audits) == 1
    finally:
        await engine.dispose()
