"""Reconciliation: read Stripe and repair whatever missed or mangled webhooks left wrong.

It applies the same steps as the webhook processor (`StripeStateApplier`), each object in its own
transaction, under a lease so that when every replica runs it only one does the work.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from service.billing.leases import release, try_acquire
from service.billing.models import StripeCustomer
from service.billing.stripe_fields import id_of
from service.billing.stripe_gateway import StripeGateway
from service.billing.subscriptions import SubscriptionRejected
from service.db.engine import SessionFactory
from service.paywall.bus import CompletionBus
from service.webhooks.applier import EventIgnored, FreshSubscription, Outcome, StripeStateApplier

logger = logging.getLogger(__name__)

LEASE_NAME = "stripe-reconcile"
LEASE_TTL = timedelta(minutes=10)


@dataclass
class ReconcileReport:
    ran: bool = True
    checkouts: int = 0
    subscriptions: int = 0
    repaired: int = 0
    ignored: int = 0


def lease_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Reconciler:
    def __init__(
        self,
        sessions: SessionFactory,
        gateway: StripeGateway,
        applier: StripeStateApplier,
        bus: CompletionBus,
        *,
        lookback: timedelta = timedelta(days=3),
    ) -> None:
        self._sessions = sessions
        self._gateway = gateway
        self._applier = applier
        self._bus = bus
        self._lookback = lookback
        self._holder = lease_holder()

    async def run(self) -> ReconcileReport:
        if not await try_acquire(self._sessions, LEASE_NAME, self._holder, LEASE_TTL):
            return ReconcileReport(ran=False)
        try:
            report = ReconcileReport()
            await self._checkouts(report)
            await self._subscriptions(report)
            logger.info("stripe reconciliation: %s", report)
            return report
        finally:
            await release(self._sessions, LEASE_NAME, self._holder)

    async def _checkouts(self, report: ReconcileReport) -> None:
        since = int(time.time() - self._lookback.total_seconds())
        for checkout in await self._gateway.recent_checkout_sessions(since):
            if checkout.mode != "subscription" or checkout.status not in ("complete", "expired"):
                continue
            report.checkouts += 1
            if checkout.status == "expired":
                await self._apply(report, partial(self._applier.checkout_expired, checkout=checkout))
                continue
            subscription_id = id_of(checkout.subscription)
            fresh = None
            if subscription_id is not None:
                subscription = await self._gateway.retrieve_subscription(subscription_id)
                fresh = FreshSubscription(
                    subscription, await self._gateway.latest_payment_reversal(subscription)
                )
            step = partial(
                self._applier.checkout_completed,
                checkout=checkout,
                fresh=fresh,
                observed_at=checkout.created,
                source="reconciliation",
            )
            await self._apply(report, step)

    async def _subscriptions(self, report: ReconcileReport) -> None:
        async with self._sessions() as session:
            customers = [row.customer_id for row in (await session.exec(select(StripeCustomer))).all()]
        for customer_id in customers:
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
        if outcome.status_changed:
            report.repaired += 1
        for change in outcome.changes:
            await self._bus.publish(change)
