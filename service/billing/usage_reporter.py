"""Sends recorded metered calls to Stripe as meter events, and checks Stripe counted what we did.

Each metered call's usage row was written in the transaction that let the call run. This job
leaves a row alone while its call may still fail and be given back (`settle`, a few minutes), then
reads unreported rows in batches (no transaction held while Stripe is called), sends them to
Stripe's meter event stream (API v2), a hundred events a request, each with the row's id as its
`identifier`, then marks the sent rows reported. A crash after sending and before marking sends
the same identifiers again on the next run, and Stripe counts an identifier once in 24 hours, so a
call is never billed twice. A refused request is retried later, backing off per row. Stripe checks
what an event means (its meter, its customer) after accepting it; `compare` finds what it dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import stripe
from sqlalchemy import func, update
from sqlmodel import col, select

from service.billing.leases import HeldLease, LeaseLost
from service.billing.plans import PlanCatalog
from service.billing.stripe_gateway import METER_EVENTS_PER_REQUEST, MeterEvent, StripeGateway
from service.billing.usage import FUNDED_BY_METER
from service.billing.usage_models import UsageRecord
from service.db.engine import SessionFactory
from service.db.metadata import utcnow

logger = logging.getLogger(__name__)

LEASE_NAME = "usage-report"
LEASE_TTL = timedelta(minutes=5)
BATCH_SIZE = 400  # rows read and marked at a time: four requests to the meter event stream
SEND_CONCURRENCY = 4
FIRST_RETRY = timedelta(seconds=30)
LONGEST_RETRY = timedelta(hours=1)
# Stripe refuses events more than 35 days old: an older call is reported as of this long ago.
OLDEST_TIMESTAMP = timedelta(days=34)
# How long rows taken for sending stay out of others' hands: their next report time moves this far
# ahead before they are sent, so a failed call no longer gives them back (`usage.release_call`),
# and a process that dies while sending leaves them due again after it.
CLAIM = LEASE_TTL


@dataclass
class UsageReport:
    ran: bool = True
    sent: int = 0
    failed: int = 0
    lease_lost: bool = False


@dataclass(frozen=True)
class UsageMismatch:
    """Stripe's meter and our rows disagree about a customer's calls of one tool in a window."""

    customer_id: str
    tool: str
    ours: int
    stripes: int


@dataclass
class _Outcome:
    sent: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def retry_delay(attempts: int) -> timedelta:
    """30 s after the first failure, doubling up to an hour."""
    delay: timedelta = min(FIRST_RETRY * (2 ** max(0, attempts - 1)), LONGEST_RETRY)
    return delay


class UsageReporter:
    def __init__(
        self,
        sessions: SessionFactory,
        gateway: StripeGateway,
        catalog: PlanCatalog,
        *,
        holder: str,
        batch_size: int = BATCH_SIZE,
        lease_ttl: timedelta = LEASE_TTL,
        settle: timedelta,
    ) -> None:
        self._sessions = sessions
        self._settle = settle
        self._gateway = gateway
        self._catalog = catalog
        self._batch_size = batch_size
        self._lease = HeldLease(sessions, LEASE_NAME, holder, lease_ttl)

    async def run(self) -> UsageReport:
        """Report every due row, a batch at a time, under the lease (one replica at a time)."""
        report = UsageReport()
        if not await self._lease.acquire():
            return UsageReport(ran=False)
        try:
            while True:
                rows = await self.due()
                if not rows:
                    break
                outcome = await self.send(rows)
                await self.mark(outcome)
                report.sent += len(outcome.sent)
                report.failed += len(outcome.failed)
                if outcome.failed and not outcome.sent:
                    break  # Stripe refuses everything now: the backoff decides when to try again
                await self._lease.keep()
        except LeaseLost:
            report.lease_lost = True
            logger.warning("usage reporting stopped: its lease expired and another process holds it")
        finally:
            await self._lease.release()
        if report.sent or report.failed:
            logger.info("usage reporting: %s", report)
        return report

    async def due(self) -> list[UsageRecord]:
        """The next batch of metered rows not yet reported whose retry time has come and whose call
        was let run at least `settle` ago, oldest first, claimed for sending (`CLAIM`): a row a
        failed call gave back meanwhile is not among them."""
        now = utcnow()
        claim = now + CLAIM
        due = (
            select(UsageRecord.id)
            .where(
                col(UsageRecord.funding) == FUNDED_BY_METER,
                col(UsageRecord.reported_at).is_(None),
                col(UsageRecord.next_report_at) <= now,
                col(UsageRecord.created_at) <= now - self._settle,
            )
            .order_by(col(UsageRecord.next_report_at), col(UsageRecord.id))
            .limit(self._batch_size)
        )
        async with self._sessions() as session, session.begin():
            # The write first: on SQLite a transaction that read before it writes can fail at once.
            # The conditions again outside the subquery: PostgreSQL re-checks them on a row another
            # claim changed while this one waited for it, and skips the row.
            await session.exec(
                update(UsageRecord)
                .where(
                    col(UsageRecord.id).in_(due.scalar_subquery()),
                    col(UsageRecord.reported_at).is_(None),
                    col(UsageRecord.next_report_at) <= now,
                )
                .values(next_report_at=claim)
            )
            claimed = await session.exec(
                select(UsageRecord)
                .where(
                    col(UsageRecord.funding) == FUNDED_BY_METER,
                    col(UsageRecord.reported_at).is_(None),
                    col(UsageRecord.next_report_at) == claim,
                )
                .order_by(col(UsageRecord.created_at), col(UsageRecord.id))
            )
            return list(claimed.all())

    async def send(self, rows: Sequence[UsageRecord]) -> _Outcome:
        """The rows as meter events, METER_EVENTS_PER_REQUEST a request and a few requests at a
        time; which were accepted and why others were not."""
        outcome = _Outcome()
        oldest = int((utcnow() - OLDEST_TIMESTAMP).timestamp())
        events: list[MeterEvent] = []
        for row in rows:
            if row.event_name is None or row.customer_id is None:
                outcome.failed[row.id] = "the usage row names no meter or customer"
                continue
            events.append(
                MeterEvent(
                    event_name=row.event_name,
                    customer_id=row.customer_id,
                    identifier=row.id,
                    timestamp=max(int(row.created_at.timestamp()), oldest),
                )
            )
        limit = asyncio.Semaphore(SEND_CONCURRENCY)

        async def one_request(batch: Sequence[MeterEvent]) -> None:
            async with limit:
                try:
                    await self._gateway.send_meter_events(batch)
                except (stripe.StripeError, OSError) as exc:
                    error = f"{type(exc).__name__}: {exc}"[:500]
                    outcome.failed.update((event.identifier, error) for event in batch)
                    return
            outcome.sent.extend(event.identifier for event in batch)

        step = METER_EVENTS_PER_REQUEST
        batches = [events[start : start + step] for start in range(0, len(events), step)]
        await asyncio.gather(*(one_request(batch) for batch in batches))
        return outcome

    async def mark(self, outcome: _Outcome) -> None:
        """Record what `send` found: sent rows reported, failed ones due again after a backoff."""
        now = utcnow()
        async with self._sessions() as session, session.begin():
            if outcome.sent:
                await session.exec(
                    update(UsageRecord)
                    .where(col(UsageRecord.id).in_(outcome.sent), col(UsageRecord.reported_at).is_(None))
                    .values(reported_at=now, last_error=None)
                )
            for usage_id, error in outcome.failed.items():
                row = await session.get(UsageRecord, usage_id, with_for_update=True)
                if row is None or row.reported_at is not None:
                    continue
                row.report_attempts += 1
                row.next_report_at = now + retry_delay(row.report_attempts)
                row.last_error = error
                session.add(row)
        for usage_id, error in outcome.failed.items():
            logger.warning("meter event for usage %s not accepted, will retry: %s", usage_id, error)

    async def compare(self, start: datetime, end: datetime) -> list[UsageMismatch]:
        """Our reported metered calls against Stripe's meter event summaries, per customer and tool,
        for calls made in [start, end), widened to whole minutes (Stripe sums by the minute)."""
        start_minute = int(start.timestamp()) // 60 * 60
        end_minute = -(-int(end.timestamp()) // 60) * 60
        start = datetime.fromtimestamp(start_minute, UTC)
        end = datetime.fromtimestamp(end_minute, UTC)
        async with self._sessions() as session:
            counted = await session.exec(
                select(UsageRecord.customer_id, UsageRecord.tool, func.count())
                .where(
                    col(UsageRecord.funding) == FUNDED_BY_METER,
                    col(UsageRecord.reported_at).is_not(None),
                    col(UsageRecord.created_at) >= start,
                    col(UsageRecord.created_at) < end,
                )
                .group_by(col(UsageRecord.customer_id), col(UsageRecord.tool))
            )
            ours = {(str(customer), str(tool)): int(calls) for customer, tool, calls in counted.all()}
        mismatches: list[UsageMismatch] = []
        for (customer_id, tool), calls in sorted(ours.items()):
            metered = self._catalog.metered_price(tool)
            if metered is None:
                continue
            theirs = await self._gateway.meter_usage(metered, customer_id, start_minute, end_minute)
            if theirs != calls:
                mismatches.append(UsageMismatch(customer_id, tool, calls, theirs))
        return mismatches
