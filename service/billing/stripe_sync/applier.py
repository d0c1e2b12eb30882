"""What Stripe's state means for us, applied inside the caller's transaction.

Both the webhook processor and the reconciler use these steps, so a missed webhook repaired by
reconciliation ends in exactly the state the webhook would have produced.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final, Generic, Literal

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.service import AuditKind, record
from service.billing.events import EntitlementChanged
from service.billing.models import StripeCustomer
from service.billing.pack_sales import PACK_ID_KEY, UnreadableSale, recorded_sale
from service.billing.plans import CreditPack, PlanCatalog
from service.billing.stripe_fields import field_of, id_of
from service.billing.stripe_gateway import PaymentReversal
from service.billing.stripe_sync.payment_requests import OpenRequests, PaymentRequests, Request
from service.billing.subscriptions import (
    ENTITLING_STATUSES,
    SubscriptionChange,
    apply_subscription,
    bind_customer,
    entitled_plan_ids,
    grants_access,
    locked_subscription,
    user_for_customer,
)
from service.billing.usage import (
    REINSTATED,
    entitling_subscription,
    grant_credits,
    included_used,
    meet_credit_payment,
    purchase_paid_by,
    reinstate_purchase,
    take_back_purchase,
)
from service.billing.usage_models import CreditEntry
from service.db.metadata import utcnow
from service.identity.models import User

logger = logging.getLogger(__name__)


class Keep(enum.Enum):
    """The reversal value meaning: this read did not look at payments, keep what we know."""

    KEEP = "keep"


KEEP: Final = Keep.KEEP

# Whether a subscription's current payment was taken back: how, None (it stands), or KEEP.
Reversal = PaymentReversal | None | Literal[Keep.KEEP]
OutcomeStatus = Literal["applied", "ignored", "duplicate", "unverified"]


@dataclass(frozen=True)
class FreshPayment:
    """Whether a one-time payment (a credit pack's) was refunded or disputed, read from Stripe before
    its checkout is applied: a refund that arrived first must not leave the credits granted."""

    payment_intent_id: str | None
    reversal: PaymentReversal | None


@dataclass(frozen=True)
class FreshSubscription:
    """A subscription just read from Stripe, and whether its current period's payment was reversed.

    `reversal` is KEEP when nothing about payments changed (a subscription's own events), which
    spares the reads of invoices and charges that only payment events need.
    """

    subscription: Any
    reversal: Reversal


class EventIgnored(Exception):
    """Genuine Stripe data that must not change anything (wrong mode, unknown customer, tampered metadata)."""


@dataclass
class Outcome:
    status: OutcomeStatus = "applied"
    detail: str | None = None
    changes: list[EntitlementChanged] = field(default_factory=list)
    status_changed: bool = False
    # (protocol era, plan) of each elicitation this outcome completed or expired, for the metrics.
    completed_era_plans: tuple[tuple[str, str], ...] = ()
    expired_era_plans: tuple[tuple[str, str], ...] = ()


def _payment_reversal(recorded: str | None) -> PaymentReversal | None:
    """A reversal as `credit_payment` records it."""
    if recorded == "refunded":
        return "refunded"
    if recorded == "disputed":
        return "disputed"
    return None


async def _already_granted(session: AsyncSession, checkout: Any) -> bool:
    """Whether this checkout's credits were granted before (e.g. before the pack was repriced)."""
    source = f"checkout:{field_of(checkout, 'id')}"
    found = await session.exec(select(CreditEntry.id).where(col(CreditEntry.source) == source))
    return found.first() is not None


def _unverified(checkout: Any, user_id: str, why: str) -> Outcome:
    """A paid credit pack that cannot be granted as it stands: refused, but loudly, since a customer
    paid (the webhook metric counts outcome `unverified`, the reconciler its report's `unverified`)."""
    logger.error(
        "credit pack checkout %s of user %s paid but not granted, an operator must look: %s",
        field_of(checkout, "id"),
        user_id,
        why,
    )
    return Outcome(status="unverified", detail=f"paid but not granted: {why}")


def subscription_of_invoice(invoice: Any) -> str | None:
    # At the pinned API version the link lives under parent.subscription_details.
    details = field_of(field_of(invoice, "parent"), "subscription_details")
    return id_of(field_of(details, "subscription")) or id_of(field_of(invoice, "subscription"))


class StripeStateApplier(Generic[Request]):
    """`requests`: the payment requests (elicitations) a payment settles, read and completed in the
    same transaction as the payment."""

    def __init__(self, catalog: PlanCatalog, requests: PaymentRequests[Request]) -> None:
        self._catalog = catalog
        self._requests = requests

    async def checkout_completed(
        self,
        session: AsyncSession,
        checkout: Any,
        fresh: FreshSubscription | FreshPayment | None,
        *,
        observed_at: int,
        source: str,
    ) -> Outcome:
        mode = field_of(checkout, "mode")
        if mode not in ("subscription", "payment"):
            raise EventIgnored("not a subscription or credit pack checkout")
        if field_of(checkout, "payment_status") not in ("paid", "no_payment_required"):
            raise EventIgnored("payment not completed yet")
        sold = self._sold_pack(checkout) if mode == "payment" else None
        user_id = field_of(checkout, "client_reference_id")
        metadata = field_of(checkout, "metadata") or {}
        elicitation_id = field_of(metadata, "elicitation_id")
        if not isinstance(user_id, str) or field_of(metadata, "user_id") != user_id:
            raise EventIgnored("client_reference_id and metadata disagree about the user")
        if not isinstance(elicitation_id, str):
            raise EventIgnored("checkout names an elicitation that is not this user's")
        elicitation, known_open = await self._requests.named_and_open(session, elicitation_id, user_id)
        # A credit pack's payment may confirm days later (e.g. SEPA Direct Debit), after retention
        # deleted its elicitation: the user is then known from the session alone.
        if (elicitation is None and sold is None) or (
            elicitation is not None and elicitation.user_id != user_id
        ):
            raise EventIgnored("checkout names an elicitation that is not this user's")
        customer_id = id_of(field_of(checkout, "customer"))
        if customer_id is None:
            raise EventIgnored("checkout has no customer")
        if isinstance(sold, str):
            if await _already_granted(session, checkout):
                return Outcome(status="ignored", detail="credits already granted for this checkout")
            return _unverified(checkout, user_id, sold)
        if elicitation is None and await session.get(User, user_id) is None:
            return _unverified(checkout, user_id, "its user no longer exists")
        await self._bind_customer(session, user_id, customer_id)
        if sold is not None:
            return await self._credit_purchase(session, checkout, sold, user_id, fresh, known_open, source)
        if not isinstance(fresh, FreshSubscription):
            raise EventIgnored("checkout has no subscription")
        return await self.subscription_state(
            session,
            fresh.subscription,
            observed_at=observed_at,
            source=source,
            reversal=fresh.reversal,
            known_open=known_open,
        )

    def _sold_pack(self, checkout: Any) -> CreditPack | str:
        """The credit pack a payment-mode checkout sold, as its session recorded it and paid in full;
        or why that cannot be verified (a paid purchase that an operator must look at)."""
        metadata = field_of(checkout, "metadata")
        pack_id = field_of(metadata, PACK_ID_KEY)
        if not isinstance(pack_id, str):
            raise EventIgnored("a payment-mode checkout that names no credit pack")
        current = self._catalog.credit_pack(pack_id)
        try:
            sold = recorded_sale(metadata, current)
        except UnreadableSale as exc:
            return str(exc)
        if sold is None:
            # A session made before sessions recorded their pack: only today's catalog can tell.
            if current is None:
                return f"credit pack {pack_id!r} is not in the catalog and the checkout recorded no price"
            sold = current
        paid = (field_of(checkout, "amount_total"), field_of(checkout, "currency"))
        if paid != (sold.amount, sold.currency):
            sold_for = (sold.amount, sold.currency)
            return f"checkout's amount {paid} is not the price {sold_for} of credit pack {pack_id!r}"
        return sold

    async def _credit_purchase(
        self,
        session: AsyncSession,
        checkout: Any,
        pack: CreditPack,
        user_id: str,
        fresh: FreshSubscription | FreshPayment | None,
        known_open: OpenRequests[Request],
        source: str,
    ) -> Outcome:
        """Grant a paid credit pack once per Checkout Session; complete the user's open elicitations
        (credits pay for any paid tool)."""
        payment_intent_id = id_of(field_of(checkout, "payment_intent"))
        # First, as a reversal does: one handled while this checkout was read and applied is seen.
        reversed_before = (
            await meet_credit_payment(session, payment_intent_id) if payment_intent_id is not None else None
        )
        granted = await grant_credits(
            session,
            user_id,
            pack,
            source=f"checkout:{field_of(checkout, 'id')}",
            payment_intent_id=payment_intent_id,
        )
        if not granted:
            return Outcome(status="ignored", detail="credits already granted for this checkout")
        await record(
            session,
            AuditKind.ENTITLEMENT_GRANTED,
            user_id=user_id,
            credits=pack.credits,
            pack=pack.id,
            source=source,
        )
        reversal = fresh.reversal if isinstance(fresh, FreshPayment) else None
        reversal = reversal or _payment_reversal(reversed_before)
        if reversal is not None and payment_intent_id is not None:
            # Refunded or disputed before this event arrived (as Stripe says now, or as a reversal
            # handled here before said): the credits go again at once.
            await self.credit_reversal(session, payment_intent_id, reversal, source)
            return Outcome(changes=[EntitlementChanged(user_id, (), ())])
        completed = await self._requests.open_requests(session, user_id, known_open)
        await self._requests.complete(session, completed)
        return Outcome(
            changes=[
                EntitlementChanged(
                    user_id,
                    tuple(item.id for item in completed),
                    tuple((item.id, item.mcp_session_id) for item in completed if item.mcp_session_id),
                )
            ],
            status_changed=True,
            completed_era_plans=tuple((item.protocol_era, item.plan_id) for item in completed),
        )

    async def credit_reversal(
        self, session: AsyncSession, payment_intent_id: str, reversal: PaymentReversal, source: str
    ) -> Outcome | None:
        """Take back the unspent credits of a refunded or disputed credit purchase; None when they
        were taken back already. A payment with no purchase yet (its checkout still being applied,
        or its webhook lost) keeps the reversal, and its grant takes the credits straight back. A
        dispute of a payment whose dispute was won already (read from Stripe before the win) takes
        nothing."""
        recorded = await meet_credit_payment(session, payment_intent_id, reversal)
        if reversal == "disputed" and recorded == REINSTATED:
            return None
        taken = await take_back_purchase(session, payment_intent_id)
        if taken is None:
            if (await session.exec(purchase_paid_by(payment_intent_id))).first() is None:
                return Outcome(detail=f"no credit purchase yet: recorded as {reversal} for its grant")
            return None
        user_id, credits = taken
        await record(
            session,
            AuditKind.ENTITLEMENT_CHANGED,
            user_id=user_id,
            status=f"credit purchase {reversal}",
            credits_taken_back=credits,
            source=source,
        )
        return Outcome(changes=[EntitlementChanged(user_id, (), ())])

    async def credit_reinstatement(
        self, session: AsyncSession, payment_intent_id: str, source: str
    ) -> Outcome | None:
        """Give back what a dispute of a credit purchase took, the dispute being won; None when
        nothing was taken, a refund took the payment back, or it was given back before."""
        given = await reinstate_purchase(session, payment_intent_id)
        if given is None:
            return None
        user_id, credits = given
        await record(
            session,
            AuditKind.ENTITLEMENT_CHANGED,
            user_id=user_id,
            status="credit purchase reinstated",
            credits_given_back=credits,
            source=source,
        )
        return Outcome(changes=[EntitlementChanged(user_id, (), ())])

    async def _bind_customer(self, session: AsyncSession, user_id: str, customer_id: str) -> None:
        owner = await user_for_customer(session, customer_id)
        if owner is not None and owner != user_id:
            raise EventIgnored("the Stripe customer belongs to another user")
        if owner is None:
            if await session.get(StripeCustomer, user_id) is not None:
                raise EventIgnored("the user already has a different Stripe customer")
            bind_customer(session, user_id, customer_id)
            await session.flush()

    async def subscription_state(
        self,
        session: AsyncSession,
        subscription: Any,
        *,
        observed_at: int,
        source: str,
        reversal: Reversal,
        known_open: OpenRequests[Request] | None = None,
    ) -> Outcome:
        """Apply `subscription`, just read from Stripe.

        `reversal`: 'refunded' or 'disputed' (the current period's payment was taken back), None (it
        stands), or KEEP (this read did not look). `known_open`: the user's open elicitations, if
        this transaction has read them already.
        """
        change = await apply_subscription(
            session, subscription, observed_at=observed_at, catalog=self._catalog
        )
        revocation_changed = False
        if change.applied and reversal is not KEEP:
            row = await locked_subscription(session, change.subscription_id)
            if row is not None and row.access_revoked_reason != reversal:
                row.access_revoked_reason = reversal
                session.add(row)
                await session.flush()
                revocation_changed = True
                await record(
                    session,
                    AuditKind.ENTITLEMENT_CHANGED,
                    user_id=row.user_id,
                    plan=row.plan_id,
                    status=f"payment {reversal}" if reversal else "payment reinstated",
                    source=source,
                )
        # Completion cannot be undone, so only a read that also checked the payment completes
        # elicitations: a purchase refunded at once must not count as paid in some orders only.
        return await self._after_change(
            session,
            change,
            source,
            complete_elicitations=reversal is not KEEP,
            revocation_changed=revocation_changed,
            known_open=known_open,
        )

    async def _after_change(
        self,
        session: AsyncSession,
        change: SubscriptionChange,
        source: str,
        *,
        complete_elicitations: bool,
        revocation_changed: bool = False,
        known_open: OpenRequests[Request] | None = None,
    ) -> Outcome:
        """Audit the change and, if asked, complete the elicitations the subscription now satisfies."""
        if not change.applied:
            return Outcome(status="ignored", detail="older than the state already applied")
        completed: list[Request] = []
        if change.new_status in ENTITLING_STATUSES and complete_elicitations:
            completed = await self._complete_satisfied(session, change, known_open)
        if change.new_status in ENTITLING_STATUSES and change.old_status not in ENTITLING_STATUSES:
            await record(
                session,
                AuditKind.ENTITLEMENT_GRANTED,
                user_id=change.user_id,
                plan=change.plan_id,
                subscription=change.subscription_id,
                source=source,
            )
        elif change.old_status != change.new_status:
            await record(
                session,
                AuditKind.ENTITLEMENT_CHANGED,
                user_id=change.user_id,
                plan=change.plan_id,
                status=change.new_status,
                source=source,
            )
        if not (change.state_changed or revocation_changed or completed):
            # The same state read again: no cache anywhere is stale, nobody needs waking.
            return Outcome()
        return Outcome(
            changes=[
                EntitlementChanged(
                    change.user_id,
                    tuple(item.id for item in completed),
                    tuple((item.id, item.mcp_session_id) for item in completed if item.mcp_session_id),
                )
            ],
            status_changed=change.old_status != change.new_status or bool(completed) or revocation_changed,
            completed_era_plans=tuple((item.protocol_era, item.plan_id) for item in completed),
        )

    async def _complete_satisfied(
        self, session: AsyncSession, change: SubscriptionChange, known_open: OpenRequests[Request] | None
    ) -> list[Request]:
        """Complete the user's open elicitations that their plans now satisfy; returns them.

        Usually the subscription that just changed satisfies them all, and then the user's other
        subscriptions are not read: one statement less on the way to the completion notice.
        """
        candidates = await self._requests.open_requests(session, change.user_id, known_open)
        if not candidates:
            return []
        row = await locked_subscription(session, change.subscription_id)  # this transaction's row
        entitled: frozenset[str] = frozenset()
        if (
            row is not None
            and row.user_id == change.user_id
            and grants_access(row, grace=timedelta(0), now=utcnow())
        ):
            entitled = frozenset({row.plan_id})
        if not all(self._requests.satisfied_by(item, entitled) for item in candidates):
            entitled = frozenset(await entitled_plan_ids(session, change.user_id, grace=timedelta(0)))
        entitled = await self._with_calls_left(session, change.user_id, entitled)
        satisfied = [item for item in candidates if self._requests.satisfied_by(item, entitled)]
        await self._requests.complete(session, satisfied)
        return satisfied

    async def _with_calls_left(
        self, session: AsyncSession, user_id: str, plan_ids: frozenset[str]
    ) -> frozenset[str]:
        """`plan_ids` without the plans whose included calls this period are used up and that block
        past them: an elicitation opened for that reason is not settled by another event about them
        (a new period, or a new subscription, starts from zero again)."""
        kept: set[str] = set()
        for plan_id in plan_ids:
            plan = self._catalog.get(plan_id)
            if plan is None or plan.included_calls is None or plan.meters_overage:
                kept.add(plan_id)
                continue
            subscription = await entitling_subscription(session, user_id, [plan_id], grace=timedelta(0))
            if subscription is not None and await included_used(session, subscription) < plan.included_calls:
                kept.add(plan_id)
        return frozenset(kept)

    async def checkout_expired(self, session: AsyncSession, checkout: Any) -> Outcome:
        metadata = field_of(checkout, "metadata") or {}
        elicitation_id = field_of(metadata, "elicitation_id")
        elicitation = (
            await self._requests.get(session, elicitation_id) if isinstance(elicitation_id, str) else None
        )
        if elicitation is None or elicitation.checkout_session_id != field_of(checkout, "id"):
            raise EventIgnored("expired checkout is not the current one of an elicitation")
        if elicitation.is_open:
            await self._requests.expire(session, elicitation)
            return Outcome(expired_era_plans=((elicitation.protocol_era, elicitation.plan_id),))
        return Outcome()
