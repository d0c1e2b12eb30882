"""Delivers `notifications/elicitation/complete` to the legacy sessions this process holds.

The SDK keeps its session registry private, so the paywall remembers the session of each paid
call that was handed an elicitation. Delivery is recorded per (elicitation, session); a session
whose client has gone simply never hears, and its retry works regardless.
"""

from __future__ import annotations

import logging
from typing import Protocol

from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.service import AuditKind, record
from service.db.engine import SessionFactory
from service.db.metadata import utcnow
from service.paywall.bus import EntitlementChanged
from service.paywall.elicitations import undelivered
from service.paywall.models import Elicitation

logger = logging.getLogger(__name__)


class CompletionChannel(Protocol):
    async def send_elicit_complete(self, elicitation_id: str) -> None: ...


class SessionNotifier:
    def __init__(self, sessions: SessionFactory) -> None:
        self._sessions = sessions
        self._held: dict[str, CompletionChannel] = {}

    def hold(self, mcp_session_id: str, channel: CompletionChannel) -> None:
        self._held[mcp_session_id] = channel

    def release(self, mcp_session_id: str) -> None:
        self._held.pop(mcp_session_id, None)

    @property
    def held_session_ids(self) -> frozenset[str]:
        return frozenset(self._held)

    async def on_change(self, change: EntitlementChanged) -> None:
        if change.completed_elicitation_ids:
            await self.deliver(change.completed_elicitation_ids)

    async def deliver(self, elicitation_ids: tuple[str, ...]) -> int:
        """Send what is owed to sessions held here; returns how many notifications went out."""
        sent = 0
        async with self._sessions() as session, session.begin():
            for delivery in await undelivered(session, elicitation_ids):
                channel = self._held.get(delivery.mcp_session_id)
                if channel is None:
                    continue
                await channel.send_elicit_complete(delivery.elicitation_id)
                delivery.delivered_at = utcnow()
                session.add(delivery)
                await _audit_delivery(session, delivery.elicitation_id, delivery.mcp_session_id)
                sent += 1
        return sent


async def _audit_delivery(session: AsyncSession, elicitation_id: str, mcp_session_id: str) -> None:
    elicitation = await session.get(Elicitation, elicitation_id)
    await record(
        session,
        AuditKind.COMPLETION_DELIVERED,
        user_id=elicitation.user_id if elicitation else None,
        elicitation_id=elicitation_id,
        mcp_session=mcp_session_id[:8],
    )
