"""Delivers `notifications/elicitation/complete` to the legacy sessions this process holds.

The SDK keeps its session registry private, so the paywall remembers the session of each paid
call that was handed an elicitation. Delivery is recorded per (elicitation, session); a session
whose client has gone simply never hears, and its retry works regardless.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.service import AuditKind, record
from service.billing.events import EntitlementChanged
from service.db.engine import SessionFactory
from service.db.metadata import utcnow
from service.paywall.elicitations import owed_to_sessions, prune_deliveries, undelivered
from service.paywall.models import Elicitation, ElicitationDelivery

logger = logging.getLogger(__name__)

PRUNE_ABOVE = 1024
# Held sessions per statement when the sweep asks what they are owed.
SWEEP_BATCH = 500
PRUNE_INTERVAL_SECONDS = 60.0
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


@dataclass
class _Held:
    since: float
    channel: CompletionChannel
    sent: set[str] = field(default_factory=set)  # elicitations whose notice this session has had


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
        self._held: dict[str, _Held] = {}
        self._sending = asyncio.Lock()
        self._pruned_at = time.monotonic()

    def hold(self, mcp_session_id: str, channel: CompletionChannel) -> None:
        now = time.monotonic()
        held = self._held.get(mcp_session_id)
        if held is not None:
            held.since, held.channel = now, channel
            return
        self._held[mcp_session_id] = _Held(now, channel)
        if len(self._held) > PRUNE_ABOVE:
            self._held = {key: held for key, held in self._held.items() if now - held.since < self._hold_for}

    def release(self, mcp_session_id: str) -> None:
        """Forget a session: it ended, or its client is gone."""
        self._held.pop(mcp_session_id, None)

    @property
    def held_session_ids(self) -> frozenset[str]:
        return frozenset(self._held)

    def _was_sent(self, elicitation_id: str, session_id: str) -> bool:
        held = self._held.get(session_id)
        return held is not None and elicitation_id in held.sent

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
                if session_id in self._held and not self._was_sent(elicitation_id, session_id)
            ]
            for elicitation_id, session_id in early:
                await self._send_one(elicitation_id, session_id)
            if early:
                for _ in range(TURNS_FOR_A_NOTICE_TO_LEAVE):
                    await asyncio.sleep(0)
            return len(early) + await self._send_owed(lambda session: undelivered(session, elicitation_ids))

    async def sweep(self) -> int:
        """Send everything completed but still owed to sessions held here (missed wake-ups), and
        now and then delete delivery rows nobody needs any more."""
        sent = 0
        held = list(self._held)
        for start in range(0, len(held), SWEEP_BATCH):
            batch = held[start : start + SWEEP_BATCH]
            async with self._sending:
                sent += await self._send_owed(functools.partial(_owed_to, batch))
        now = time.monotonic()
        if now - self._pruned_at >= PRUNE_INTERVAL_SECONDS:
            self._pruned_at = now
            async with self._sessions() as session, session.begin():
                await prune_deliveries(session)
        return sent

    async def _send_one(self, elicitation_id: str, session_id: str) -> bool:
        held = self._held.get(session_id)
        if held is None:
            return False
        try:
            async with asyncio.timeout(self._send_timeout):
                await held.channel.send_elicit_complete(elicitation_id)
        except Exception:  # a client that is gone or stuck is not an error; its retry works
            logger.info("session %s… is gone or not reading; completion not delivered", session_id[:8])
            self.release(session_id)
            return False
        held.sent.add(elicitation_id)
        return True

    async def _send_owed(self, owed: Callable[[AsyncSession], Awaitable[list[ElicitationDelivery]]]) -> int:
        """Under `_sending`: mark what was sent, send what is still owed; rows are locked against
        other processes."""
        sent = 0
        async with self._sessions() as session, session.begin():
            for delivery in await owed(session):
                key = (delivery.elicitation_id, delivery.mcp_session_id)
                if not self._was_sent(*key):
                    if not await self._send_one(*key):
                        continue
                    sent += 1
                delivery.delivered_at = utcnow()
                session.add(delivery)
                await _audit_delivery(session, delivery.elicitation_id, delivery.mcp_session_id)
        return sent


async def _owed_to(mcp_session_ids: list[str], session: AsyncSession) -> list[ElicitationDelivery]:
    return await owed_to_sessions(session, mcp_session_ids)


async def _audit_delivery(session: AsyncSession, elicitation_id: str, mcp_session_id: str) -> None:
    elicitation = await session.get(Elicitation, elicitation_id)
    await record(
        session,
        AuditKind.COMPLETION_DELIVERED,
        user_id=elicitation.user_id if elicitation else None,
        elicitation_id=elicitation_id,
        mcp_session=mcp_session_id[:8],
    )
