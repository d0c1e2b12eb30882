"""Delivers `notifications/elicitation/complete` to the legacy sessions this process holds.

The SDK keeps its session registry private, so the paywall remembers the session of each paid
call that was handed an elicitation. Delivery is recorded per (elicitation, session); a session
whose client has gone simply never hears, and its retry works regardless.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.service import AuditKind, record
from service.db.engine import SessionFactory
from service.db.metadata import utcnow
from service.paywall.bus import EntitlementChanged
from service.paywall.elicitations import owed_to_sessions, undelivered
from service.paywall.models import Elicitation, ElicitationDelivery

logger = logging.getLogger(__name__)

PRUNE_ABOVE = 1024
# A notice goes into the session's stream buffer at once unless its client stopped reading; then
# give up on that session rather than hold every other session's notice behind it.
SEND_TIMEOUT_SECONDS = 5.0
# A sent notice still has to pass a few tasks on its way to the socket (the session's writer, the
# transport's router, the GET stream's writer, the SSE response), each waiting for a turn of the
# event loop. The bookkeeping after a send is CPU-heavy ORM work; letting the loop go round this
# many times first puts the notice on the wire before it, not between its statements.
TURNS_FOR_A_NOTICE_TO_LEAVE = 6


class CompletionChannel(Protocol):
    async def send_elicit_complete(self, elicitation_id: str) -> None: ...


class SessionNotifier:
    """Holds a reference to each legacy session that is owed a notice, for at most `hold_for` seconds.

    After that its elicitations have expired, so nothing more can be owed to it.
    """

    def __init__(
        self, sessions: SessionFactory, *, hold_for: float, send_timeout: float = SEND_TIMEOUT_SECONDS
    ) -> None:
        self._sessions = sessions
        self._hold_for = hold_for
        self._send_timeout = send_timeout
        self._held: dict[str, tuple[float, CompletionChannel]] = {}
        self._sent: dict[tuple[str, str], float] = {}  # (elicitation, session) -> when
        self._sending = asyncio.Lock()

    def hold(self, mcp_session_id: str, channel: CompletionChannel) -> None:
        now = time.monotonic()
        self._held[mcp_session_id] = (now, channel)
        if len(self._held) > PRUNE_ABOVE:
            self._held = {key: held for key, held in self._held.items() if now - held[0] < self._hold_for}

    def release(self, mcp_session_id: str) -> None:
        self._held.pop(mcp_session_id, None)

    @property
    def held_session_ids(self) -> frozenset[str]:
        return frozenset(self._held)

    async def on_change(self, change: EntitlementChanged) -> None:
        if change.completed_elicitation_ids:
            await self.deliver(change.completed_elicitation_ids, known=change.sessions_owed)

    async def deliver(
        self, elicitation_ids: tuple[str, ...], *, known: tuple[tuple[str, str], ...] = ()
    ) -> int:
        """Send what is owed for these elicitations to sessions held here; how many went out.

        `known` pairs (elicitation, session) that the completing transaction already named: a held
        one is sent before any database work, which is most of a notice's latency. Only this
        process can reach its sessions, so an in-memory record of what it sent keeps each notice
        single; the rows are marked delivered right after, then whatever else is owed is sent.
        """
        async with self._sending:
            early = [
                (elicitation_id, session_id)
                for elicitation_id, session_id in known
                if session_id in self._held and (elicitation_id, session_id) not in self._sent
            ]
            for elicitation_id, session_id in early:
                await self._send_one(elicitation_id, session_id)
            if early:
                for _ in range(TURNS_FOR_A_NOTICE_TO_LEAVE):
                    await asyncio.sleep(0)
            return len(early) + await self._send_owed(lambda session: undelivered(session, elicitation_ids))

    async def sweep(self) -> int:
        """Send everything completed but still owed to sessions held here (missed wake-ups)."""
        held = list(self._held)
        if not held:
            return 0
        async with self._sending:
            return await self._send_owed(lambda session: owed_to_sessions(session, held))

    async def _send_one(self, elicitation_id: str, session_id: str) -> bool:
        held = self._held.get(session_id)
        if held is None:
            return False
        try:
            async with asyncio.timeout(self._send_timeout):
                await held[1].send_elicit_complete(elicitation_id)
        except Exception:  # a client that is gone or stuck is not an error; its retry works
            logger.info("session %s… is gone or not reading; completion not delivered", session_id[:8])
            self.release(session_id)
            return False
        now = time.monotonic()
        self._sent[(elicitation_id, session_id)] = now
        if len(self._sent) > PRUNE_ABOVE:
            self._sent = {key: at for key, at in self._sent.items() if now - at < self._hold_for}
        return True

    async def _send_owed(self, owed: Callable[[AsyncSession], Awaitable[list[ElicitationDelivery]]]) -> int:
        """Under `_sending`: mark what was sent, send what is still owed; rows are locked against
        other processes."""
        sent = 0
        async with self._sessions() as session, session.begin():
            for delivery in await owed(session):
                key = (delivery.elicitation_id, delivery.mcp_session_id)
                if key not in self._sent:
                    if not await self._send_one(*key):
                        continue
                    sent += 1
                delivery.delivered_at = utcnow()
                session.add(delivery)
                await _audit_delivery(session, delivery.elicitation_id, delivery.mcp_session_id)
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
