"""Billing tables: who a Stripe customer is, what they subscribe to, which Stripe events we applied."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Text
from sqlmodel import Field, SQLModel

from service.db.columns import utc_column
from service.db.metadata import utcnow


class StripeCustomer(SQLModel, table=True):
    """One Stripe customer per user, created by us and never matched by email."""

    __tablename__ = "stripe_customer"

    user_id: str = Field(primary_key=True, foreign_key="user_account.id", ondelete="CASCADE", max_length=40)
    customer_id: str = Field(max_length=255, unique=True)
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())


class Subscription(SQLModel, table=True):
    """Our copy of a Stripe subscription, kept current by webhooks and reconciliation.

    `stripe_updated` is the `created` time of the newest event (or read) applied, so an older
    event arriving late cannot overwrite newer state.
    """

    __tablename__ = "subscription"

    id: str = Field(primary_key=True, max_length=255)
    user_id: str = Field(foreign_key="user_account.id", ondelete="CASCADE", max_length=40, index=True)
    customer_id: str = Field(max_length=255, index=True)
    plan_id: str = Field(max_length=64)
    status: str = Field(max_length=32)
    cancel_at_period_end: bool = False
    current_period_end: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
    past_due_since: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
    # Set by a refund or dispute of the charge that paid the current period; cleared by a later paid invoice.
    access_revoked_reason: str | None = Field(default=None, max_length=32)
    stripe_updated: int = 0
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    updated_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())


class StripeEvent(SQLModel, table=True):
    """Each verified Stripe event, stored once under its id and applied in the same transaction."""

    __tablename__ = "stripe_event"

    id: str = Field(primary_key=True, max_length=255)
    type: str = Field(max_length=100, index=True)
    created: int
    livemode: bool = False
    outcome: str = Field(max_length=32)  # applied | ignored | unverified
    detail: str | None = Field(default=None, sa_type=Text)
    received_at: datetime = Field(default_factory=utcnow, sa_column=utc_column(index=True))


class JobLease(SQLModel, table=True):
    """Who may run a periodic job right now; one row per job, taken by a conditional update."""

    __tablename__ = "job_lease"

    name: str = Field(primary_key=True, max_length=64)
    holder: str = Field(max_length=128)
    expires_at: datetime = Field(sa_column=utc_column())
