"""usage indexes written per paid call

Every credit-funded or metered call writes a usage row (and a spend adds a ledger entry) in the
transaction that lets it run; each index it touches is another page written at every commit.
`ix_usage_record_user_id_created_at` served no query: it gives way to a partial index on what
`billing_status` sums (a subscription's metered calls in a period), which only metered rows enter.
`ix_credit_entry_payment_intent_id` becomes partial: spends carry no payment.

Revision ID: 2c1c282a91da
Revises: 1a593b8c6d6b
Create Date: 2026-12-04 19:45:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "2c1c282a91da"
down_revision: str | None = "1a593b8c6d6b"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

METERED = sa.text("funding = 'metered'")
WITH_PAYMENT = sa.text("payment_intent_id IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("usage_record", schema=None) as batch_op:
        batch_op.drop_index("ix_usage_record_user_id_created_at")
        batch_op.create_index(
            "ix_usage_record_metered_period",
            ["subscription_id", "period"],
            unique=False,
            sqlite_where=METERED,
            postgresql_where=METERED,
        )
    with op.batch_alter_table("credit_entry", schema=None) as batch_op:
        batch_op.drop_index("ix_credit_entry_payment_intent_id")
        batch_op.create_index(
            "ix_credit_entry_payment_intent_id",
            ["payment_intent_id"],
            unique=False,
            sqlite_where=WITH_PAYMENT,
            postgresql_where=WITH_PAYMENT,
        )


def downgrade() -> None:
    with op.batch_alter_table("credit_entry", schema=None) as batch_op:
        batch_op.drop_index("ix_credit_entry_payment_intent_id")
        batch_op.create_index("ix_credit_entry_payment_intent_id", ["payment_intent_id"], unique=False)
    with op.batch_alter_table("usage_record", schema=None) as batch_op:
        batch_op.drop_index("ix_usage_record_metered_period")
        batch_op.create_index("ix_usage_record_user_id_created_at", ["user_id", "created_at"], unique=False)
