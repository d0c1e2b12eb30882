"""Applies verified Stripe events: each stored once under its id, in the same transaction as its effects.

Effects become visible (cache invalidation, waiting calls released, completion notices) only after
the transaction commits. A failure rolls everything back and answers non-2xx, so Stripe retries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import stripe
from sqlalchemy.exc import IntegrityError
from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.service import AuditKind, record
from service.billing.models import StripeCustomer, StripeEvent
from service.billing.plans import PlanCatalog
from service.billing.stripe_gateway import StripeGateway
from service.billing.subscriptions import (
    ENTITLING_STATUSES,
    SubscriptionChange,
    SubscriptionRejected,
    apply_subscription,
    entitled_plan_ids,
    user_for_customer,
)
from service.db.engine import SessionFactory
from service.paywall.bus import EntitlementChanged, InProcessBus
from service.paywall.elicitations import complete_satisfied
from service.paywall.models import Elicitation, ElicitationStatus

logger = logging.getLogger(__name__)

CHECKOUT_COMPLETED = frozenset({"checkout.session.completed", "checkout.session.async_payment_succeeded"})
SUBSCRIPTION_EVENTS = frozenset(
    {"customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted"}
)

Satisfies = Callable[[Elicitation, frozenset[str]], bool]


class EventIgnored(Exception):
    """A genuine event that must not change anything (wrong mode, unknown customer, tampered metadata)."""


@dataclass
class Outcome:
    status: str = "applied"  # applied | ignored | duplicate
    detail: str | None = None
    changes: list[EntitlementChanged] = field(default_factory=list)


def _get(obj: Any, name: str) -> Any:
    try:
        return obj[name]
    except (KeyError, TypeError):
        return None


class WebhookProcessor:
    def __init__(
        self,
        sessions: SessionFactory,
        gateway: StripeGateway,
        catalog: PlanCatalog,
        bus: InProcessBus,
        satisfies: Satisfies,
    ) -> None:
        self._sessions = sessions
        self._gateway = gateway
        self._catalog = catalog
        self._bus = bus
        self._satisfies = satisfies

    async def process(self, event: stripe.Event) -> Outcome:
        prefetched = await self._prefetch(event)
        try:
            async with self._sessions() as session, session.begin():
                if await session.get(StripeEvent, event.id) is not None:
                    return Outcome(status="duplicate")
                stored = StripeEvent(
                    id=event.id,
                    type=event.type,
                    created=event.created,
                    livemode=event.livemode,
                    outcome="applied",
                )
                session.add(stored)
                await session.flush()  # claims the id: a concurrent duplicate fails here or at commit
                outcome = await self._apply(session, event, prefetched)
                stored.outcome, stored.detail = outcome.status, outcome.detail
                session.add(stored)
                await record(
                    session,
                    AuditKind.WEBHOOK_ACCEPTED,
                    event_id=event.id,
                    type=event.type,
                    outcome=outcome.status,
                )
        except IntegrityError:
            return Outcome(status="duplicate")
        for change in outcome.changes:
            await self._bus.publish(change)
        return outcome

    async def _prefetch(self, event: stripe.Event) -> dict[str, Any] | None:
        """Network reads happen before the transaction opens, never while it holds locks."""
        if event.type in CHECKOUT_COMPLETED:
            subscription_id = _get(event.data.object, "subscription")
            subscription_id = _get(subscription_id, "id") or subscription_id
            if isinstance(subscription_id, str):
                subscription = await self._gateway.retrieve_subscription(subscription_id)
                return {"subscription": subscription, "read_at": int(time.time())}
        return None

    async def _apply(
        self, session: AsyncSession, event: stripe.Event, prefetched: dict[str, Any] | None
    ) -> Outcome:
        try:
            if event.type in CHECKOUT_COMPLETED:
                return await self._checkout_completed(session, event, prefetched)
            if event.type in SUBSCRIPTION_EVENTS:
                change = await apply_subscription(
                    session, event.data.object, observed_at=event.created, catalog=self._catalog
                )
                return await self._after_subscription_change(session, change, event.id)
            if event.type == "checkout.session.expired":
                return await self._checkout_expired(session, event)
        except (EventIgnored, SubscriptionRejected) as exc:
            logger.warning("stripe event %s (%s) ignored: %s", event.id, event.type, exc)
            return Outcome(status="ignored", detail=str(exc))
        return Outcome(status="ignored", detail="event type not handled")

    async def _checkout_completed(
        self, session: AsyncSession, event: stripe.Event, prefetched: dict[str, Any] | None
    ) -> Outcome:
        checkout = event.data.object
        if _get(checkout, "mode") != "subscription":
            raise EventIgnored("not a subscription checkout")
        if _get(checkout, "payment_status") not in ("paid", "no_payment_required"):
            raise EventIgnored("payment not completed yet")
        user_id = _get(checkout, "client_reference_id")
        metadata = _get(checkout, "metadata") or {}
        elicitation_id = _get(metadata, "elicitation_id")
        if not isinstance(user_id, str) or _get(metadata, "user_id") != user_id:
            raise EventIgnored("client_reference_id and metadata disagree about the user")
        elicitation = (
            await session.get(Elicitation, elicitation_id) if isinstance(elicitation_id, str) else None
        )
        if elicitation is None or elicitation.user_id != user_id:
            raise EventIgnored("checkout names an elicitation that is not this user's")
        customer_id = _get(checkout, "customer")
        customer_id = _get(customer_id, "id") or customer_id
        if not isinstance(customer_id, str):
            raise EventIgnored("checkout has no customer")
        await self._bind_customer(session, user_id, customer_id)
        if prefetched is None:
            raise EventIgnored("checkout has no subscription")
        change = await apply_subscription(
            session,
            prefetched["subscription"],
            observed_at=max(prefetched["read_at"], event.created),
            catalog=self._catalog,
        )
        return await self._after_subscription_change(session, change, event.id)

    async def _bind_customer(self, session: AsyncSession, user_id: str, customer_id: str) -> None:
        owner = await user_for_customer(session, customer_id)
        if owner is not None and owner != user_id:
            raise EventIgnored("the Stripe customer belongs to another user")
        if owner is None:
            if await session.get(StripeCustomer, user_id) is not None:
                raise EventIgnored("the user already has a different Stripe customer")
            session.add(StripeCustomer(user_id=user_id, customer_id=customer_id))
            await session.flush()

    async def _after_subscription_change(
        self, session: AsyncSession, change: SubscriptionChange, event_id: str
    ) -> Outcome:
        if not change.applied:
            return Outcome(status="ignored", detail="older than the state already applied")
        completed: list[Elicitation] = []
        if change.new_status in ENTITLING_STATUSES:
            entitled = frozenset(await entitled_plan_ids(session, change.user_id, grace=timedelta(0)))
            completed = await complete_satisfied(
                session, change.user_id, satisfied=lambda item: self._satisfies(item, entitled)
            )
            if change.old_status not in ENTITLING_STATUSES:
                await record(
                    session,
                    AuditKind.ENTITLEMENT_GRANTED,
                    user_id=change.user_id,
                    plan=change.plan_id,
                    subscription=change.subscription_id,
                    event_id=event_id,
                )
        elif change.old_status != change.new_status:
            await record(
                session,
                AuditKind.ENTITLEMENT_CHANGED,
                user_id=change.user_id,
                plan=change.plan_id,
                status=change.new_status,
                event_id=event_id,
            )
        return Outcome(changes=[EntitlementChanged(change.user_id, tuple(item.id for item in completed))])

    async def _checkout_expired(self, session: AsyncSession, event: stripe.Event) -> Outcome:
        metadata = _get(event.data.object, "metadata") or {}
        elicitation_id = _get(metadata, "elicitation_id")
        elicitation = (
            await session.get(Elicitation, elicitation_id) if isinstance(elicitation_id, str) else None
        )
        if elicitation is None or elicitation.checkout_session_id != _get(event.data.object, "id"):
            raise EventIgnored("expired checkout is not the current one of an elicitation")
        if elicitation.status == ElicitationStatus.OPEN.value:
            elicitation.status = ElicitationStatus.EXPIRED.value
            session.add(elicitation)
        return Outcome()
