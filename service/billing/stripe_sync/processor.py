"""Applies verified Stripe events: each stored once under its id, in the same transaction as its effects.

Effects become visible (cache invalidation, waiting calls released, completion notices) only after
the transaction commits. A failure rolls everything back and answers non-2xx, so Stripe retries.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.service import AuditKind, record_many
from service.billing.events import BillingEvents
from service.billing.models import StripeEvent
from service.billing.stripe_fields import field_of, id_of
from service.billing.stripe_gateway import PaymentReversal, StripeGateway
from service.billing.stripe_sync.applier import (
    KEEP,
    EventIgnored,
    FreshPayment,
    FreshSubscription,
    Outcome,
    StripeStateApplier,
    subscription_of_invoice,
)
from service.billing.stripe_sync.fresh_reads import CoalescedReads
from service.billing.stripe_sync.stripe_events import StripeEventData
from service.billing.subscriptions import SubscriptionRejected, customer_of, lock_for_apply
from service.db.engine import SessionFactory
from service.db.group_commit import GroupCommit
from service.db.metadata import utcnow

logger = logging.getLogger(__name__)

CHECKOUT_COMPLETED = frozenset({"checkout.session.completed", "checkout.session.async_payment_succeeded"})
SUBSCRIPTION_EVENTS = frozenset(
    {"customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted"}
)
INVOICE_EVENTS = frozenset({"invoice.paid", "invoice.payment_failed"})
# A dispute opened, or an inquiry escalated to a chargeback (its funds withdrawn only then).
DISPUTES_TAKING = frozenset({"charge.dispute.created", "charge.dispute.funds_withdrawn"})
CHARGE_REVERSALS = DISPUTES_TAKING | {"charge.refunded"}
# A dispute decided (closed won or lost) or its funds given back (won): whether the payment stands
# is read from Stripe, since the charge stays `disputed` after a win.
DISPUTES_CLOSED = frozenset({"charge.dispute.closed", "charge.dispute.funds_reinstated"})
DISPUTE_EVENTS = DISPUTES_CLOSED | DISPUTES_TAKING
PAYMENT_EVENTS = CHARGE_REVERSALS | DISPUTES_CLOSED
CHECKOUT_EXPIRED = "checkout.session.expired"
# What a Stripe webhook endpoint must send (docs/stripe.md lists them; a test keeps the two equal).
HANDLED_EVENT_TYPES = (
    CHECKOUT_COMPLETED | SUBSCRIPTION_EVENTS | INVOICE_EVENTS | PAYMENT_EVENTS | {CHECKOUT_EXPIRED}
)


Fresh = FreshSubscription | FreshPayment | None
Prefetched = tuple[StripeEventData, Fresh]


def _event_id(event: StripeEventData) -> str:
    return event.id


def _lock_key(fresh: Fresh) -> str:
    subscription_id = field_of(fresh.subscription, "id") if isinstance(fresh, FreshSubscription) else None
    return subscription_id if isinstance(subscription_id, str) else ""


_EVENT_TABLE: Table = StripeEvent.__table__  # type: ignore[attr-defined]
# Built once: SQLAlchemy memoizes a statement's cache key on the object, so a reused statement
# skips constructing the clause and keying it on every batch. One per dialect (ON CONFLICT).
_CLAIM_STATEMENTS = {
    "postgresql": postgresql_insert(_EVENT_TABLE)
    .on_conflict_do_nothing(index_elements=["id"])
    .returning(_EVENT_TABLE.c.id),
    "sqlite": sqlite_insert(_EVENT_TABLE)
    .on_conflict_do_nothing(index_elements=["id"])
    .returning(_EVENT_TABLE.c.id),
}


async def claim_event_ids(session: AsyncSession, events: Sequence[StripeEventData]) -> set[str]:
    """Insert the events' rows, skipping ids already stored; the ids this transaction claimed.

    A concurrent transaction inserting the same id makes this one wait for its outcome, so an
    id is never claimed twice.
    """
    connection = await session.connection()
    statement = _CLAIM_STATEMENTS[connection.dialect.name]
    received_at = utcnow()
    rows = [
        {
            "id": event.id,
            "type": event.type,
            "created": event.created,
            "livemode": event.livemode,
            "outcome": "applied",
            "detail": None,
            "received_at": received_at,
        }
        for event in events
    ]
    # On the transaction's connection, not through the ORM, which would route the rows through its
    # bulk-persistence machinery for a table it holds no objects of. One statement with many
    # parameter sets: SQLAlchemy sends them as one multi-row INSERT. One row (a lone delivery, the
    # usual case) as a plain execute: a list, even of one, goes through SQLAlchemy's many-rows
    # INSERT machinery, which costs more (docs/adr/0008-measured-choices.md).
    result = await connection.execute(statement, rows[0] if len(rows) == 1 else rows)
    return set(result.scalars())


class WebhookProcessor:
    def __init__(
        self,
        sessions: SessionFactory,
        gateway: StripeGateway,
        applier: StripeStateApplier[Any],
        events: BillingEvents,
    ) -> None:
        self._sessions = sessions
        self._gateway = gateway
        self._applier = applier
        self._events = events
        self._subscription_reads = CoalescedReads(gateway.retrieve_subscription)
        self._commits: GroupCommit[Prefetched, Outcome] = GroupCommit(self._commit_batch)

    @property
    def queued_events(self) -> int:
        """Verified events read back from Stripe and waiting for the next transaction."""
        return self._commits.queued

    async def process(self, event: StripeEventData) -> Outcome:
        with self._commits.coming():
            prefetched = await self._prefetch(event)
        outcome = await self._commits.submit((event, prefetched))
        await self.announce(outcome)
        return outcome

    async def _commit_batch(self, batch: Sequence[Prefetched]) -> list[Outcome | Exception]:
        if len(batch) > 1:
            try:
                return list(await self._store_and_apply_many(batch))
            except Exception:
                # Which event failed is unknown: each alone, so only that one answers non-2xx.
                logger.info("a batch of %d stripe events failed together; applying each alone", len(batch))
        results: list[Outcome | Exception] = []
        for event, prefetched in batch:
            try:
                results.append(await self._store_and_apply_retrying(event, prefetched))
            except Exception as exc:
                results.append(exc)
        return results

    async def _store_and_apply_retrying(self, event: StripeEventData, prefetched: Fresh) -> Outcome:
        """One event in its own transaction, claimed and applied the way a batch is.

        An event id already stored is not an error ("duplicate": `claim_event_ids` skips it); any
        integrity error is some other row, and propagates unless a second go resolves it.
        """
        item = [(event, prefetched)]
        try:
            return (await self._store_and_apply_many(item))[0]
        except IntegrityError:
            # Another delivery (another event, maybe on another replica) inserted a row this one
            # inserts too, such as a subscription new to us, and committed first. Its row is visible
            # now, so one more go updates it instead; the event was not stored, so nothing is lost.
            logger.info("stripe event %s raced another delivery; applying it again", event.id)
        return (await self._store_and_apply_many(item))[0]

    async def _store_and_apply_many(self, batch: Sequence[Prefetched]) -> list[Outcome]:
        """The batch in one transaction: every event id claimed by one INSERT, then each applied.

        Events apply in the order of the subscription they lock, so two replicas' batches lock
        rows in the same order and cannot deadlock each other.
        """
        first_of: dict[str, int] = {}
        for index, (event, _) in enumerate(batch):
            first_of.setdefault(event.id, index)
        outcomes = [Outcome(status="duplicate") for _ in batch]
        async with self._sessions() as session, session.begin():
            # Claimed in id order: two replicas handed the same events wait for each other in
            # one direction only.
            claimed = await claim_event_ids(
                session, sorted((batch[i][0] for i in first_of.values()), key=_event_id)
            )
            subscriptions = [fresh.subscription for _, fresh in batch if isinstance(fresh, FreshSubscription)]
            await lock_for_apply(
                session,
                (_lock_key(fresh) for _, fresh in batch if isinstance(fresh, FreshSubscription)),
                (customer for customer in map(customer_of, subscriptions) if customer is not None),
            )
            order = sorted(
                (index for event_id, index in first_of.items() if event_id in claimed),
                key=lambda index: (_lock_key(batch[index][1]), index),
            )
            accepted: list[dict[str, str]] = []
            for index in order:
                event, prefetched = batch[index]
                outcome = await self._apply(session, event, prefetched)
                if outcome.status != "applied" or outcome.detail is not None:
                    await session.exec(
                        update(StripeEvent)
                        .where(col(StripeEvent.id) == event.id)
                        .values(outcome=outcome.status, detail=outcome.detail)
                    )
                accepted.append({"event_id": event.id, "type": event.type, "outcome": outcome.status})
                outcomes[index] = outcome
            await record_many(session, AuditKind.WEBHOOK_ACCEPTED, accepted)
        return outcomes

    async def announce(self, outcome: Outcome) -> None:
        """Publish the outcome's events; its transaction has committed."""
        for change in outcome.changes:
            await self._events.publish(change)

    async def _prefetch(self, event: StripeEventData) -> Fresh:
        """Network reads happen before the transaction opens, never while it holds locks.

        Every event about a subscription re-reads it, and whether its current payment was refunded
        or disputed, from Stripe: the result never depends on the order events arrive in, and an
        event's own snapshot (possibly older than what we know) is never applied. Events about one
        subscription share a read that started after they all arrived (`CoalescedReads`).
        """
        obj = event.object
        subscription_id: str | None = None
        if event.type in CHECKOUT_COMPLETED:
            if field_of(obj, "mode") == "payment":
                payment_intent_id = id_of(field_of(obj, "payment_intent"))
                reversal = (
                    await self._gateway.payment_reversal(payment_intent_id) if payment_intent_id else None
                )
                return FreshPayment(payment_intent_id, reversal)
            subscription_id = id_of(field_of(obj, "subscription"))
            if subscription_id is None:
                return None
            subscription, reversal = await self._gateway.subscription_with_reversal(
                subscription_id, id_of(field_of(obj, "invoice")), id_of(field_of(obj, "customer"))
            )
            return FreshSubscription(subscription, reversal)
        if event.type in SUBSCRIPTION_EVENTS:
            subscription_id = id_of(field_of(obj, "id"))
            if subscription_id is not None:
                # A subscription's own event changes nothing about its payments.
                return FreshSubscription(await self._subscription_reads.read(subscription_id), KEEP)
        elif event.type in INVOICE_EVENTS:
            subscription_id = subscription_of_invoice(obj)
        elif event.type in PAYMENT_EVENTS:
            payment_intent_id = id_of(field_of(obj, "payment_intent"))
            target = await self._gateway.payment_target(payment_intent_id)
            subscription_id = target.subscription_id if target else None
            if subscription_id is None and event.type in DISPUTE_EVENTS and payment_intent_id is not None:
                # A one-time payment (a credit pack's): whether its dispute is open, lost or won.
                reversal = await self._gateway.payment_reversal(payment_intent_id)
                return FreshPayment(payment_intent_id, reversal)
        if subscription_id is None:
            return None
        subscription = await self._subscription_reads.read(subscription_id)
        return FreshSubscription(subscription, await self._gateway.latest_payment_reversal(subscription))

    async def _apply(self, session: AsyncSession, event: StripeEventData, fresh: Fresh) -> Outcome:
        obj, applier, source = event.object, self._applier, f"event {event.id}"
        try:
            if event.type in CHECKOUT_COMPLETED:
                return await applier.checkout_completed(
                    session, obj, fresh, observed_at=event.created, source=source
                )
            if event.type in DISPUTES_CLOSED and not isinstance(fresh, FreshSubscription):
                return await self._dispute_closed(session, fresh, source)
            if event.type in CHARGE_REVERSALS and not isinstance(fresh, FreshSubscription):
                payment_intent_id = id_of(field_of(obj, "payment_intent"))
                if isinstance(fresh, FreshPayment) and fresh.reversal is None:
                    raise EventIgnored("Stripe says the payment stands: its dispute was won or is an inquiry")
                reversal: PaymentReversal = "disputed" if event.type in DISPUTES_TAKING else "refunded"
                if reversal == "refunded" and not field_of(obj, "refunded"):
                    raise EventIgnored("a partial refund of a payment keeps what it bought")
                if payment_intent_id is None:
                    raise EventIgnored("the charge names no payment")
                taken = await applier.credit_reversal(session, payment_intent_id, reversal, source)
                if taken is None:
                    raise EventIgnored("the credit purchase of this payment was taken back before")
                return taken
            if (
                event.type in SUBSCRIPTION_EVENTS
                or event.type in INVOICE_EVENTS
                or event.type in PAYMENT_EVENTS
            ):
                if not isinstance(fresh, FreshSubscription):
                    raise EventIgnored("the event is not about a subscription")
                return await applier.subscription_state(
                    session,
                    fresh.subscription,
                    observed_at=event.created,
                    source=source,
                    reversal=fresh.reversal,
                )
            if event.type == CHECKOUT_EXPIRED:
                return await applier.checkout_expired(session, obj)
        except (EventIgnored, SubscriptionRejected) as exc:
            logger.warning("stripe event %s (%s) ignored: %s", event.id, event.type, exc)
            return Outcome(status="ignored", detail=str(exc))
        return Outcome(status="ignored", detail="event type not handled")

    async def _dispute_closed(self, session: AsyncSession, fresh: Fresh, source: str) -> Outcome:
        """A credit pack's dispute decided: a won one gives back what its dispute took, once."""
        if not isinstance(fresh, FreshPayment) or fresh.payment_intent_id is None:
            raise EventIgnored("the dispute names no payment")
        if fresh.reversal is not None:
            raise EventIgnored(f"the payment stays taken back ({fresh.reversal})")
        given = await self._applier.credit_reinstatement(session, fresh.payment_intent_id, source)
        if given is None:
            raise EventIgnored("nothing of this payment's credit purchase is taken back to give")
        return given
