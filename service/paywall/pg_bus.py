"""The completion bus across replicas: PostgreSQL LISTEN/NOTIFY as the wake-up call.

NOTIFY is only a hint. The elicitation tables stay the truth, and every replica also sweeps them
on a timer and after its listener reconnects, so a lost notification or a dropped connection
delays a completion notice but never loses it. Revoked grants travel the same channel
(`"kind": "revoked"`); a replica that reconnects forgets its cached tokens instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from service.billing.events import EntitlementChanged
from service.db.engine import libpq_url
from service.paywall.bus import InProcessBus

logger = logging.getLogger(__name__)

CHANNEL = "paid_mcp_completions"
RECONNECT_DELAYS = (0.1, 0.5, 1.0, 2.0, 5.0)


def replica_id() -> str:
    return f"{socket.gethostname()}:{secrets.token_hex(4)}"


def _revocation(origin: str, grant_id: str) -> dict[str, object]:
    return {"origin": origin, "kind": "revoked", "grant": grant_id}


async def notify_revocation(session: AsyncSession, grant_id: str) -> None:
    """Tells every replica that a grant was revoked, from a process without a bus (the CLI).

    Sent in the caller's transaction, so PostgreSQL delivers it only if the revocation commits.
    """
    connection = await session.connection()
    if connection.dialect.name != "postgresql":
        return  # SQLite: the service caches tokens for at most TOKEN_CACHE_SECONDS
    await connection.execute(
        text("SELECT pg_notify(:channel, :payload)"),
        {"channel": CHANNEL, "payload": json.dumps(_revocation(replica_id(), grant_id))},
    )


class PostgresBus(InProcessBus):
    """Local listeners hear a change at once; other replicas hear it through NOTIFY."""

    def __init__(
        self, engine: AsyncEngine, database_url: str, *, on_reconnect: Callable[[], Awaitable[object]]
    ) -> None:
        super().__init__()
        self._engine = engine
        self._conninfo = libpq_url(database_url)
        self._on_reconnect = on_reconnect
        self.replica = replica_id()
        self.listening = asyncio.Event()

    async def publish(self, event: EntitlementChanged) -> None:
        await super().publish(event)
        await self._notify(
            {
                "origin": self.replica,
                "user": event.user_id,
                "completed": list(event.completed_elicitation_ids),
                "owed": [list(pair) for pair in event.sessions_owed],
            }
        )

    async def publish_revocation(self, grant_id: str) -> None:
        await super().publish_revocation(grant_id)
        await self._notify(_revocation(self.replica, grant_id))

    async def _notify(self, message: dict[str, object]) -> None:
        payload = json.dumps(message)
        try:
            async with self._engine.begin() as connection:
                await connection.execute(
                    text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": payload}
                )
        except Exception:
            # The sweep (or, for a revocation, the token cache's expiry) delivers it; the change is committed.
            logger.warning("could not NOTIFY other replicas; they will catch up", exc_info=True)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        task = asyncio.create_task(self._listen_forever(), name="completion-bus-listener")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _listen_forever(self) -> None:
        failures = 0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as connection:
                    await connection.execute(f"LISTEN {CHANNEL}")
                    failures = 0
                    self.listening.set()
                    await self._on_reconnect()  # whatever was announced while we were not listening
                    async for notification in connection.notifies():
                        await self._receive(notification.payload)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.listening.clear()
                delay = RECONNECT_DELAYS[min(failures, len(RECONNECT_DELAYS) - 1)]
                failures += 1
                logger.warning(
                    "completion listener lost its connection; retrying in %.1fs", delay, exc_info=True
                )
                await asyncio.sleep(delay)

    async def _receive(self, payload: str) -> None:
        try:
            message = json.loads(payload)
            if message.get("origin") == self.replica:
                return  # local listeners already heard it
            if message.get("kind") == "revoked":
                revoked_grant = str(message["grant"])
            else:
                revoked_grant = None
                event = EntitlementChanged(
                    str(message["user"]),
                    tuple(str(item) for item in message["completed"]),
                    tuple((str(pair[0]), str(pair[1])) for pair in message.get("owed", [])),
                )
        except (ValueError, KeyError, TypeError, IndexError):
            logger.warning("ignoring a malformed completion notification")
            return
        if revoked_grant is not None:
            await InProcessBus.publish_revocation(self, revoked_grant)
        else:
            await InProcessBus.publish(self, event)
