"""Usage tables: each counted call, the per-period counters of included calls, and the credit ledger."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, Index, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from service.db.columns import utc_column
from service.db.metadata import utcnow


class UsageRecord(SQLModel, table=True):
    """One paid call that was counted, metered or paid with a credit, recorded in the transaction
    that let it run. `(user_id, call_key)` is unique, so a retried call is recorded once; the id is
    the `identifier` of its Stripe meter event, so Stripe counts it once however often it is sent.
    """

    __tablename__ = "usage_record"
    __table_args__ = (
        UniqueConstraint("user_id", "call_key"),
        # What the reporter looks for: metered calls not yet reported.
        Index(
            "ix_usage_record_unreported",
            "next_report_at",
            sqlite_where=text("funding = 'metered' AND reported_at IS NULL"),
            postgresql_where=text("funding = 'metered' AND reported_at IS NULL"),
        ),
        # What `billing_status` sums: a subscription's metered calls in a period. Credit-funded
        # and included calls, most of the rows, write no entry here.
        Index(
            "ix_usage_record_metered_period",
            "subscription_id",
            "period",
            sqlite_where=text("funding = 'metered'"),
            postgresql_where=text("funding = 'metered'"),
        ),
    )

    id: str = Field(primary_key=True, max_length=64)
    user_id: str = Field(foreign_key="user_account.id", ondelete="CASCADE", max_length=40)
    call_key: str = Field(max_length=64)
    tool: str = Field(max_length=200)
    funding: str = Field(max_length=16)  # included | metered | credit
    plan_id: str | None = Field(default=None, max_length=64)
    subscription_id: str | None = Field(default=None, max_length=255)
    period: str | None = Field(default=None, max_length=40)
    # Set for metered calls: whom Stripe bills and which meter counts the call.
    customer_id: str | None = Field(default=None, max_length=255)
    event_name: str | None = Field(default=None, max_length=100)
    unit_amount: int | None = None
    currency: str | None = Field(default=None, max_length=3)
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    reported_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
    report_attempts: int = 0
    next_report_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
    last_error: str | None = Field(default=None, sa_type=Text)


class UsageCounter(SQLModel, table=True):
    """Included calls used in one billing period of one subscription, raised by a conditional update."""

    __tablename__ = "usage_counter"
    __table_args__ = (CheckConstraint("used >= 0", name="used_not_negative"),)

    subscription_id: str = Field(primary_key=True, max_length=255)
    period: str = Field(primary_key=True, max_length=40)
    user_id: str = Field(foreign_key="user_account.id", ondelete="CASCADE", max_length=40, index=True)
    used: int = 0


class CreditBalance(SQLModel, table=True):
    """The sum of a user's ledger entries, kept in the same transactions that append to it."""

    __tablename__ = "credit_balance"
    __table_args__ = (CheckConstraint("balance >= 0", name="balance_not_negative"),)

    user_id: str = Field(primary_key=True, foreign_key="user_account.id", ondelete="CASCADE", max_length=40)
    balance: int = 0
    updated_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())


class CreditEntry(SQLModel, table=True):
    """The append-only credit ledger: purchases (+), spends (-), reversals (-), reinstatements (+).
    `source` is unique, so a webhook delivered twice or a retried call cannot add or take a credit
    twice."""

    __tablename__ = "credit_entry"
    __table_args__ = (
        # Purchases and their reversals carry a payment; spends, most of the rows, write no entry here.
        Index(
            "ix_credit_entry_payment_intent_id",
            "payment_intent_id",
            sqlite_where=text("payment_intent_id IS NOT NULL"),
            postgresql_where=text("payment_intent_id IS NOT NULL"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    user_id: str = Field(foreign_key="user_account.id", ondelete="CASCADE", max_length=40, index=True)
    delta: int
    reason: str = Field(max_length=16)  # purchase | spend | reversal | reinstatement
    source: str = Field(max_length=300, unique=True)
    pack_id: str | None = Field(default=None, max_length=64)
    payment_intent_id: str | None = Field(default=None, max_length=255)
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())


class CreditPayment(SQLModel, table=True):
    """A credit pack's payment, by payment intent: written by its grant and by its refund or dispute,
    whichever comes first, so that the two meet on this row (on PostgreSQL the second waits for the
    first to commit). A reversal that finds no purchase yet stays here, and the grant that comes
    later takes its credits straight back in its own transaction."""

    __tablename__ = "credit_payment"

    payment_intent_id: str = Field(primary_key=True, max_length=255)
    reversal: str | None = Field(default=None, max_length=16)  # None | refunded | disputed | reinstated
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
