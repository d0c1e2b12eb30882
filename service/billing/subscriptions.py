"""Subscription state from Stripe objects, and the entitlement rule built on it.

State only moves forward: an object older than what we already applied is ignored, and a
subscription that reached a terminal status is never revived by a late event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Table, bindparam
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from service.billing.models import StripeCustomer, Subscription
from service.billing.plans import PlanCatalog
from service.billing.stripe_fields import field_of
from service.db.metadata import utcnow

ENTITLING_STATUSES = frozenset({"active", "trialing"})
TERMINAL_STATUSES = frozenset({"canceled", "incomplete_expired"})


class SubscriptionRejected(Exception):
    """A Stripe subscription we cannot attribute to a user or a plan; never grants anything."""


@dataclass(frozen=True)
class SubscriptionChange:
    subscription_id: str
    user_id: str
    plan_id: str
    old_status: str | None
    new_status: str
    applied: bool
    # Whether anything that decides entitlement moved; a re-read that found the same state did not.
    state_changed: bool = True


def _period_end(subscription: Mapping[str, Any]) -> datetime | None:
    # At the API version stripe-python 16 pins, billing periods live on subscription items.
    items = field_of(field_of(subscription, "items"), "data") or []
    ends = [field_of(item, "current_period_end") for item in items]
    ends = [end for end in ends if isinstance(end, int)]
    legacy_end = field_of(subscription, "current_period_end")
    if not ends and isinstance(legacy_end, int):
        ends = [legacy_end]
    return datetime.fromtimestamp(max(ends), UTC) if ends else None


def plan_of(subscription: Any, catalog: PlanCatalog) -> str | None:
    """The plan whose catalog price the subscription bills, or None.

    Only the price decides: `metadata.plan_id` is written by whoever created the subscription (any
    holder of the Stripe key, the dashboard) and is never read, so a price outside the catalog
    grants nothing whatever the metadata says.
    """
    for item in field_of(field_of(subscription, "items"), "data") or []:
        plan = catalog.by_lookup_key(field_of(field_of(item, "price"), "lookup_key"))
        if plan is not None:
            return plan.id
    return None


# session.info keys: what the current transaction already read and locked, so applying many Stripe
# objects in one transaction costs two queries up front instead of two per object.
_LOCKED_SUBSCRIPTIONS = "billing.locked_subscriptions"
_CUSTOMER_OWNERS_KEY = "billing.customer_owners"


def _known(session: AsyncSession, key: str) -> dict[str, Any]:
    """A dict that lives as long as the session's current transaction (locks end with it)."""
    transaction = session.sync_session.get_transaction()
    held = session.info.get(key)
    if held is None or held[0] is not transaction:
        held = (transaction, {})
        session.info[key] = held
    known: dict[str, Any] = held[1]
    return known


# Built once and reused: SQLAlchemy memoizes a statement's cache key on the object, so each batch
# skips constructing and keying them (docs/adr/0008-measured-choices.md).
_LOCK_SUBSCRIPTIONS = (
    select(Subscription)
    .where(col(Subscription.id).in_(bindparam("subscription_ids", expanding=True)))
    .order_by(col(Subscription.id))
    .with_for_update()
)
_CUSTOMER_TABLE: Table = StripeCustomer.__table__  # type: ignore[attr-defined]
_CUSTOMER_OWNERS = select(_CUSTOMER_TABLE.c.customer_id, _CUSTOMER_TABLE.c.user_id).where(
    _CUSTOMER_TABLE.c.customer_id.in_(bindparam("customer_ids", expanding=True))
)


async def lock_for_apply(
    session: AsyncSession, subscription_ids: Iterable[str], customer_ids: Iterable[str]
) -> None:
    """Lock the subscriptions' rows (in id order, as every batch does, so batches cannot deadlock)
    and read who owns the customers, for `apply_subscription` calls later in this transaction."""
    wanted = sorted({subscription_id for subscription_id in subscription_ids if subscription_id})
    if wanted:
        rows = await session.exec(_LOCK_SUBSCRIPTIONS, params={"subscription_ids": wanted})
        # Held here, not only in the identity map, which forgets unmodified objects nobody holds.
        # A subscription new to us is remembered as absent: inserting it later in this transaction
        # either succeeds or fails on its key (a concurrent insert), never silently duplicates it.
        locked = _known(session, _LOCKED_SUBSCRIPTIONS)
        locked.update(dict.fromkeys(wanted))
        locked.update((row.id, row) for row in rows.all())
    customers = sorted(set(customer_ids))
    if customers:
        if session.new or session.dirty:
            await session.flush()  # the owners are read on the connection, past the ORM's autoflush
        connection = await session.connection()
        found = await connection.execute(_CUSTOMER_OWNERS, {"customer_ids": customers})
        owners = _known(session, _CUSTOMER_OWNERS_KEY)
        owners.update(dict.fromkeys(customers))  # unbound so far; `bind_customer` may bind one
        owners.update((customer_id, user_id) for customer_id, user_id in found.all())


async def user_for_customer(session: AsyncSession, customer_id: str) -> str | None:
    owners = _known(session, _CUSTOMER_OWNERS_KEY)
    if customer_id in owners:
        known: str | None = owners[customer_id]
        return known
    result = await session.exec(select(StripeCustomer).where(col(StripeCustomer.customer_id) == customer_id))
    row = result.first()
    user_id = row.user_id if row is not None else None
    owners[customer_id] = user_id
    return user_id


def bind_customer(session: AsyncSession, user_id: str, customer_id: str) -> None:
    """Record that `customer_id` is `user_id`'s Stripe customer (flushed with the transaction)."""
    session.add(StripeCustomer(user_id=user_id, customer_id=customer_id))
    _known(session, _CUSTOMER_OWNERS_KEY)[customer_id] = user_id


async def locked_subscription(session: AsyncSession, subscription_id: str) -> Subscription | None:
    """Our row of the subscription, locked for the rest of the transaction (read once per transaction)."""
    locked = _known(session, _LOCKED_SUBSCRIPTIONS)
    if subscription_id in locked:
        known: Subscription | None = locked[subscription_id]
        return known
    row = await session.get(Subscription, subscription_id, with_for_update=True)
    locked[subscription_id] = row
    return row


def customer_of(subscription: Any) -> str | None:
    customer_id = field_of(subscription, "customer")
    customer_id = field_of(customer_id, "id") or customer_id
    return customer_id if isinstance(customer_id, str) else None


async def apply_subscription(
    session: AsyncSession,
    subscription: Any,
    *,
    observed_at: int,
    catalog: PlanCatalog,
) -> SubscriptionChange:
    """Upsert our copy of `subscription`, an object just read from Stripe.

    Callers pass fresh reads only (never an event's snapshot, which may be older than what we
    already know), so the read wins, except that nothing revives a subscription that reached a
    terminal status. `observed_at` records the newest event time that led to a read.
    """
    subscription_id = field_of(subscription, "id")
    customer_id = customer_of(subscription)
    status = field_of(subscription, "status")
    if (
        not isinstance(subscription_id, str)
        or not isinstance(customer_id, str)
        or not isinstance(status, str)
    ):
        raise SubscriptionRejected("subscription object lacks id, customer or status")
    user_id = await user_for_customer(session, customer_id)
    if user_id is None:
        raise SubscriptionRejected(f"customer {customer_id} is not bound to a user")
    claimed = field_of(field_of(subscription, "metadata"), "user_id")
    if claimed and claimed != user_id:
        raise SubscriptionRejected(f"subscription metadata names {claimed}, customer belongs to {user_id}")
    plan_id = plan_of(subscription, catalog)
    if plan_id is None:
        raise SubscriptionRejected(f"subscription {subscription_id} has no price of a known plan")

    row = await locked_subscription(session, subscription_id)
    old_status = row.status if row else None
    if row is not None and row.status in TERMINAL_STATUSES and status != row.status:
        return SubscriptionChange(subscription_id, user_id, plan_id, old_status, row.status, applied=False)
    now = utcnow()
    before = _entitlement_state(row) if row is not None else None
    if row is None:
        row = Subscription(
            id=subscription_id, user_id=user_id, customer_id=customer_id, plan_id=plan_id, status=status
        )
        _known(session, _LOCKED_SUBSCRIPTIONS)[subscription_id] = row  # ours until commit
    row.plan_id = plan_id
    if status == "past_due" and row.past_due_since is None:
        row.past_due_since = now
    elif status != "past_due":
        row.past_due_since = None
    row.status = status
    row.cancel_at_period_end = bool(field_of(subscription, "cancel_at_period_end"))
    row.current_period_end = _period_end(subscription)
    row.stripe_updated = max(row.stripe_updated, observed_at)
    state_changed = before != _entitlement_state(row)
    if before is None or session.is_modified(row):
        row.updated_at = now
        session.add(row)
        await session.flush()
    return SubscriptionChange(
        subscription_id, user_id, plan_id, old_status, status, applied=True, state_changed=state_changed
    )


def _entitlement_state(row: Subscription) -> tuple[object, ...]:
    return (
        row.plan_id,
        row.status,
        row.cancel_at_period_end,
        row.current_period_end,
        row.past_due_since,
        row.access_revoked_reason,
    )


def grants_access(row: Subscription, *, grace: timedelta, now: datetime) -> bool:
    if row.access_revoked_reason is not None:
        return False
    if row.cancel_at_period_end and row.current_period_end is not None and row.current_period_end <= now:
        # Stripe ends it at the period end; a missed `deleted` event must not extend access.
        return False
    if row.status in ENTITLING_STATUSES:
        return True
    if row.status == "past_due" and row.past_due_since is not None:
        return now - row.past_due_since < grace
    return False


async def entitled_plan_ids(session: AsyncSession, user_id: str, *, grace: timedelta) -> set[str]:
    return {row.plan_id for row in await granting_subscriptions(session, user_id, grace=grace)}


async def granting_subscriptions(
    session: AsyncSession, user_id: str, *, grace: timedelta
) -> list[Subscription]:
    """The user's subscriptions that grant access now, the latest first."""
    result = await session.exec(
        select(Subscription)
        .where(col(Subscription.user_id) == user_id)
        .order_by(col(Subscription.created_at).desc())
    )
    now = utcnow()
    return [row for row in result.all() if grants_access(row, grace=grace, now=now)]


async def is_entitled(
    session: AsyncSession, user_id: str, plan_ids: Iterable[str], *, grace: timedelta
) -> bool:
    return not (await entitled_plan_ids(session, user_id, grace=grace)).isdisjoint(plan_ids)
