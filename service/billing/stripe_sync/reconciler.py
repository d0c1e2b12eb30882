"""Reconciliation: read Stripe and repair whatever missed or mangled webhooks left wrong.

It applies the same steps as the webhook processor (`StripeStateApplier`), each object in its own
transaction, under a lease so that when every replica runs it only one does the work. It is a
background job beside latency-bound webhooks: it reads from Stripe only for checkouts our records
do not already reflect and for refund and dispute events never stored here, keeps to a pace
(`Pace`), and renews its lease while a long run lasts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Literal

import stripe
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from service.billing.events import BillingEvents
from service.billing.leases import HeldLease, LeaseLost
from service.billing.models import StripeCustomer, StripeEvent, Subscription
from service.billing.pack_sales import PACK_ID_KEY
from service.billing.stripe_fields import field_of, id_of
from service.billing.stripe_gateway import StripeData, StripeGateway
from service.billing.stripe_sync.applier import (
    EventIgnored,
    FreshPayment,
    FreshSubscription,
    Outcome,
    StripeStateApplier,
)
from service.billing.stripe_sync.payment_requests import PaymentRequests
from service.billing.stripe_sync.processor import PAYMENT_EVENTS
from service.billing.stripe_sync.stripe_events import MalformedEvent, StripeEventData
from service.billing.subscriptions import SubscriptionRejected
from service.billing.usage_models import CreditEntry
from service.db.engine import SessionFactory
from service.observability.metrics import ServiceMetrics
from service.periodic import Pace

logger = logging.getLogger(__name__)

LEASE_NAME = "stripe-reconcile"
LEASE_TTL = timedelta(minutes=10)


@dataclass
class ReconcileReport:
    ran: bool = True
    checkouts: int = 0
    # Of `checkouts`: already reflected here, or naming no elicitation of ours; not read again.
    checkouts_current: int = 0
    subscriptions: int = 0
    # Refund and dispute events Stripe lists that were never stored here, fed through the webhook
    # pipeline; each one applied also counts as repaired.
    events_replayed: int = 0
    repaired: int = 0
    ignored: int = 0
    # Paid credit packs that could not be verified and were not granted: each is logged at ERROR.
    unverified: int = 0
    lease_lost: bool = False


# How a run ended, as the reconciliation metric counts it.
RunOutcome = Literal["ran", "lease_lost", "skipped_lease_held", "error"]
# Feeds one event through the webhook pipeline (`WebhookProcessor.process`).
ReplayEvent = Callable[[StripeEventData], Awaitable[Outcome]]


def lease_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Reconciler:
    def __init__(
        self,
        sessions: SessionFactory,
        gateway: StripeGateway,
        applier: StripeStateApplier[Any],
        requests: PaymentRequests[Any],
        events: BillingEvents,
        replay: ReplayEvent,
        *,
        lookback: timedelta = timedelta(days=3),
        steps_per_second: float = 0,
        lease_ttl: timedelta = LEASE_TTL,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self._sessions = sessions
        self._gateway = gateway
        self._applier = applier
        self._requests = requests
        self._events = events
        self._replay = replay
        self._lookback = lookback
        self._pace = Pace(steps_per_second)
        self._lease = HeldLease(sessions, LEASE_NAME, lease_holder(), lease_ttl)
        self._on_progress: Callable[[ReconcileReport], None] | None = None
        self._metrics = metrics

    async def run(self, on_progress: Callable[[ReconcileReport], None] | None = None) -> ReconcileReport:
        """`on_progress` sees the report so far before each step (the CLI shows it)."""
        report = ReconcileReport()
        try:
            if not await self._lease.acquire():
                self._count("skipped_lease_held", report)
                return ReconcileReport(ran=False)
            self._on_progress = on_progress
            try:
                await self._checkouts(report)
                await self._payment_events(report)
                await self._subscriptions(report)
            except LeaseLost:
                report.lease_lost = True
                logger.warning(
                    "stripe reconciliation stopped: its lease expired and another process holds it"
                )
            finally:
                await self._lease.release()
        except Exception:
            self._count("error", report)
            raise
        self._count("lease_lost" if report.lease_lost else "ran", report)
        logger.info("stripe reconciliation: %s", report)
        return report

    def _count(self, outcome: RunOutcome, report: ReconcileReport) -> None:
        if self._metrics is not None:
            self._metrics.reconcile_ran(outcome, report.repaired)

    async def _next_step(self, report: ReconcileReport) -> None:
        """Before each object that costs Stripe reads and a transaction: keep to the pace and
        keep the lease (a long run renews it)."""
        if self._on_progress is not None:
            self._on_progress(report)
        await self._pace.step()
        await self._lease.keep()

    async def _checkouts(self, report: ReconcileReport) -> None:
        since = int(time.time() - self._lookback.total_seconds())
        async with contextlib.aclosing(self._gateway.recent_checkout_pages(since)) as pages:
            while True:
                await self._next_step(report)  # each page is a Stripe read
                page = await anext(pages, None)
                if page is None:
                    return
                await self._checkout_page(report, page)

    async def _checkout_page(self, report: ReconcileReport, page: list[StripeData]) -> None:
        checkouts = [
            checkout
            for checkout in page
            if (
                field_of(checkout, "mode") == "subscription"
                and field_of(checkout, "status") in ("complete", "expired")
            )
            or (field_of(checkout, "mode") == "payment" and field_of(checkout, "status") == "complete")
        ]
        unreflected = await self._unreflected(checkouts)
        for checkout in checkouts:
            report.checkouts += 1
            if field_of(checkout, "id") not in unreflected:
                report.checkouts_current += 1
                continue
            await self._next_step(report)
            await self._checkout(report, checkout)

    async def _checkout(self, report: ReconcileReport, checkout: StripeData) -> None:
        if field_of(checkout, "status") == "expired":
            await self._apply(report, partial(self._applier.checkout_expired, checkout=checkout))
            return
        subscription_id = id_of(field_of(checkout, "subscription"))
        payment_intent_id = id_of(field_of(checkout, "payment_intent"))
        fresh: FreshSubscription | FreshPayment | None = None
        if field_of(checkout, "mode") == "payment":
            reversal = await self._gateway.payment_reversal(payment_intent_id) if payment_intent_id else None
            fresh = FreshPayment(payment_intent_id, reversal)
        elif subscription_id is not None:
            subscription = await self._gateway.retrieve_subscription(subscription_id)
            fresh = FreshSubscription(subscription, await self._gateway.latest_payment_reversal(subscription))
        step = partial(
            self._applier.checkout_completed,
            checkout=checkout,
            fresh=fresh,
            observed_at=field_of(checkout, "created"),
            source="reconciliation",
        )
        await self._apply(report, step)

    async def _payment_events(self, report: ReconcileReport) -> None:
        """Refunds and disputes whose every webhook was missed. A credit pack's payment is known to
        be taken back (or given back, a dispute won) only from these events, so Stripe's own list
        of them over the lookback is read, and each one never stored here goes through the webhook
        pipeline, which reads the payment afresh and stores the event (so it is replayed once)."""
        since = int(time.time() - self._lookback.total_seconds())
        async with contextlib.aclosing(self._gateway.recent_event_pages(since, PAYMENT_EVENTS)) as pages:
            while True:
                await self._next_step(report)  # each page is a Stripe read
                page = await anext(pages, None)
                if page is None:
                    return
                events = _events_of(page)
                stored = await self._stored(events)
                # Oldest first within the page; each replay reads Stripe's state afresh, so the
                # order across pages changes nothing.
                for event in sorted(events, key=lambda event: event.created):
                    if event.id in stored:
                        continue
                    await self._next_step(report)
                    outcome = await self._replay(event)
                    report.events_replayed += 1
                    if outcome.status == "applied":
                        report.repaired += 1

    async def _stored(self, events: Sequence[StripeEventData]) -> set[str]:
        async with self._sessions() as session:
            found = await session.exec(
                select(StripeEvent.id).where(col(StripeEvent.id).in_([event.id for event in events]))
            )
            return set(found.all())

    async def _subscriptions(self, report: ReconcileReport) -> None:
        async with self._sessions() as session:
            customers = [row.customer_id for row in (await session.exec(select(StripeCustomer))).all()]
        for customer_id in customers:
            await self._next_step(report)
            for subscription in await self._gateway.list_subscriptions(customer_id):
                report.subscriptions += 1
                step = partial(
                    self._applier.subscription_state,
                    subscription=subscription,
                    observed_at=0,
                    source="reconciliation",
                    reversal=await self._gateway.latest_payment_reversal(subscription),
                )
                await self._apply(report, step)

    async def _unreflected(self, checkouts: list[StripeData]) -> set[str]:
        """The ids of the checkouts (one listed page, at most 100) whose outcome our records may
        lack, from two local reads.

        A credit pack's checkout needs applying until its credits are granted (once, by its id). A
        completed subscription checkout needs applying while its elicitation is still open or its
        subscription is not stored here (a stored one is bound to its customer, so the
        subscription pass below re-reads it anyway); an expired one while it is its open
        elicitation's current checkout. A checkout that names someone else's elicitation, or (but
        for a credit pack's, whose elicitation retention may have deleted) none of ours, would be
        ignored after its Stripe reads: it is skipped before them.
        """
        named = [
            (checkout, _elicitation_of(checkout), id_of(field_of(checkout, "subscription")))
            for checkout in checkouts
        ]
        elicitation_ids = {elicitation_id for _, elicitation_id, _ in named if elicitation_id is not None}
        subscription_ids = {subscription_id for _, _, subscription_id in named if subscription_id is not None}
        async with self._sessions() as session:
            elicitations = await self._requests.by_ids(session, elicitation_ids)
            found = await session.exec(
                select(Subscription.id).where(col(Subscription.id).in_(subscription_ids))
            )
            stored = set(found.all())
            granted = await session.exec(
                select(CreditEntry.source).where(
                    col(CreditEntry.source).in_(
                        [f"checkout:{field_of(checkout, 'id')}" for checkout in checkouts]
                    )
                )
            )
            credited = set(granted.all())
        unreflected: set[str] = set()
        for checkout, elicitation_id, subscription_id in named:
            metadata = field_of(checkout, "metadata")
            elicitation = elicitations.get(elicitation_id or "")
            checkout_id = field_of(checkout, "id")
            if field_of(checkout, "mode") == "payment":
                # A pack's elicitation may be gone (retention) by the time its payment confirms.
                ours = (
                    elicitation.user_id == field_of(metadata, "user_id")
                    if elicitation is not None
                    else elicitation_id is not None and isinstance(field_of(metadata, PACK_ID_KEY), str)
                )
                needed = ours and f"checkout:{checkout_id}" not in credited
            elif elicitation is None or elicitation.user_id != field_of(metadata, "user_id"):
                continue
            elif field_of(checkout, "status") == "expired":
                needed = elicitation.is_open and elicitation.checkout_session_id == checkout_id
            else:
                needed = elicitation.is_open or subscription_id not in stored
            if needed and isinstance(checkout_id, str):
                unreflected.add(checkout_id)
        return unreflected

    async def _apply(
        self, report: ReconcileReport, step: Callable[[AsyncSession], Awaitable[Outcome]]
    ) -> None:
        try:
            async with self._sessions() as session, session.begin():
                outcome: Outcome = await step(session)
        except (EventIgnored, SubscriptionRejected) as exc:
            report.ignored += 1
            logger.debug("reconciliation skipped an object: %s", exc)
            return
        if self._metrics is not None:
            self._metrics.elicitations_settled(outcome.completed_era_plans, outcome.expired_era_plans)
        if outcome.status == "unverified":
            report.unverified += 1
        if outcome.status_changed:
            report.repaired += 1
        for change in outcome.changes:
            await self._events.publish(change)  # the transaction has committed


def _events_of(page: list[StripeData]) -> list[StripeEventData]:
    events: list[StripeEventData] = []
    for item in page:
        try:
            payload = item.to_dict() if isinstance(item, stripe.StripeObject) else dict(item)
            events.append(StripeEventData.from_json(payload))
        except MalformedEvent as exc:
            logger.warning("reconciliation skipped an event Stripe listed: %s", exc)
    return events


def _elicitation_of(checkout: StripeData) -> str | None:
    value = field_of(field_of(checkout, "metadata"), "elicitation_id")
    return value if isinstance(value, str) else None
