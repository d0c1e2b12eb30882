"""One legacy client that stopped reading must not hold back another session's completion notice."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from service.db.engine import create_engine, create_session_factory
from service.db.metadata import utcnow
from service.identity import service as identity
from service.paywall.models import Elicitation, ElicitationDelivery, ElicitationStatus
from service.paywall.notifier import SessionNotifier
from tests.support.service import DEFAULT_PASSWORD


class StuckClient:
    """A session whose client never reads again: the send never returns."""

    async def send_elicit_complete(self, elicitation_id: str) -> None:
        await asyncio.Event().wait()


class ReadingClient:
    def __init__(self) -> None:
        self.received: list[str] = []

    async def send_elicit_complete(self, elicitation_id: str) -> None:
        self.received.append(elicitation_id)


async def test_a_stuck_session_does_not_hold_back_the_others(database_url: str) -> None:
    engine = create_engine(database_url)
    sessions = create_session_factory(engine)
    try:
        async with sessions() as session, session.begin():
            user = await identity.create_user(session, "notified", DEFAULT_PASSWORD)
            for elicitation_id, mcp_session in (("eli_stuck", "sess-stuck"), ("eli_ok", "sess-ok")):
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
