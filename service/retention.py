"""Retention: deletes rows the service no longer needs, in bounded batches, under a lease.

Audit rows and stored Stripe events after their retention periods; browser sessions,
authorization codes (redeemed ones, kept as tombstones, too), tokens and elicitations some days
after they expired (a token without an expiry, a personal access token, once that long has passed
since it was revoked); consumed OIDC sign-in states an hour after their login cookie expired;
dynamically registered clients nobody ever used (no consent, code or token) some days after they
registered, so anonymous registrations cannot pile up. Each batch is its own short transaction of
at most `batch_rows` rows per table, so the job never holds locks for long, and every replica may
run it: the lease lets one do the work.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, exists, or_, select

from service.audit.models import AuditEvent
from service.billing.leases import HeldLease, LeaseLost
from service.billing.models import StripeEvent
from service.db.engine import SessionFactory
from service.db.metadata import utcnow
from service.identity.models import AuthorizationCode, BrowserSession, OAuthClient, OAuthConsent, Token
from service.identity.oidc.models import ConsumedLoginState
from service.paywall.models import Elicitation
from service.settings import RetentionSettings

logger = logging.getLogger(__name__)

LEASE_NAME = "retention"
LEASE_TTL = timedelta(minutes=10)
# A consumed state only has to outlive its login cookie; the margin covers replicas' clock skew.
CONSUMED_STATE_MARGIN = timedelta(hours=1)


@dataclass(frozen=True)
class RetentionPolicy:
    audit: timedelta = timedelta(days=90)
    stripe_events: timedelta = timedelta(days=30)
    after_expiry: timedelta = timedelta(days=7)  # sessions, codes, tokens, elicitations
    unused_clients: timedelta = timedelta(days=7)  # since registration, for clients never used
    batch_rows: int = 1000


@dataclass
class RetentionReport:
    ran: bool = True
    deleted: dict[str, int] = field(default_factory=dict)
    lease_lost: bool = False


def _table(model: Any) -> Any:
    return model.__table__


def _expired_conditions(policy: RetentionPolicy, now: datetime) -> list[tuple[Any, ColumnElement[bool]]]:
    """(table, which of its rows to delete) for every table the policy covers."""
    expired = now - policy.after_expiry
    audit, events = _table(AuditEvent), _table(StripeEvent)
    sessions, codes, tokens, elicitations, states = (
        _table(model) for model in (BrowserSession, AuthorizationCode, Token, Elicitation, ConsumedLoginState)
    )
    clients, consents = _table(OAuthClient), _table(OAuthConsent)
    unused = [~exists().where(used.c.client_id == clients.c.client_id) for used in (consents, codes, tokens)]
    return [
        (audit, audit.c.at < now - policy.audit),
        (events, events.c.received_at < now - policy.stripe_events),
        (sessions, sessions.c.expires_at < expired),
        (codes, codes.c.expires_at < expired),
        (
            tokens,
            or_(
                tokens.c.expires_at < expired,
                and_(tokens.c.expires_at.is_(None), tokens.c.revoked_at < expired),
            ),
        ),
        # Their delivery rows go with them (ON DELETE CASCADE).
        (elicitations, elicitations.c.expires_at < expired),
        (states, states.c.expires_at < now - CONSUMED_STATE_MARGIN),
        # Only clients no consent, code or token names, so no grant depends on one (tokens have no
        # foreign key to a client; consents and codes would go with it, ON DELETE CASCADE).
        (clients, and_(clients.c.created_at < now - policy.unused_clients, *unused)),
    ]


class RetentionJob:
    def __init__(
        self, sessions: SessionFactory, policy: RetentionPolicy, *, lease_ttl: timedelta = LEASE_TTL
    ) -> None:
        self._sessions = sessions
        self._policy = policy
        holder = f"{socket.gethostname()}:{os.getpid()}"
        self._lease = HeldLease(sessions, LEASE_NAME, holder, lease_ttl)

    @classmethod
    def from_settings(cls, settings: RetentionSettings, sessions: SessionFactory) -> RetentionJob:
        policy = RetentionPolicy(
            audit=timedelta(days=settings.audit_days),
            stripe_events=timedelta(days=settings.stripe_event_days),
            after_expiry=timedelta(days=settings.expired_days),
            unused_clients=timedelta(days=settings.unused_client_days),
            batch_rows=settings.batch_rows,
        )
        return cls(sessions, policy)

    async def run(self) -> RetentionReport:
        if not await self._lease.acquire():
            return RetentionReport(ran=False)
        report = RetentionReport()
        try:
            for table, condition in _expired_conditions(self._policy, utcnow()):
                report.deleted[table.name] = await self._purge(table, condition)
        except LeaseLost:
            report.lease_lost = True
            logger.warning("retention stopped: another replica holds its lease now")
        finally:
            if not report.lease_lost:
                await self._lease.release()
        if any(report.deleted.values()):
            logger.info("retention deleted %s", {name: n for name, n in report.deleted.items() if n})
        return report

    async def _purge(self, table: Any, condition: ColumnElement[bool]) -> int:
        """Deletes the rows `condition` selects, `batch_rows` per transaction, until none are left."""
        [key] = table.primary_key.columns
        pick = select(key).where(condition).limit(self._policy.batch_rows)
        total = 0
        while True:
            await self._lease.keep()
            async with self._sessions() as session, session.begin():
                connection = await session.connection()
                keys = list((await connection.execute(pick)).scalars())
                if keys:
                    # The condition again: a row put to use since it was picked (a client given a
                    # consent, say) is kept.
                    await connection.execute(delete(table).where(key.in_(keys), condition))
            total += len(keys)
            if len(keys) < self._policy.batch_rows:
                return total
