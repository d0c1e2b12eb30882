"""credit payment reversals

A refund or dispute of a credit pack's payment handled while its checkout was still being applied
found no purchase and was lost. `credit_payment` is where the grant and the reversal of one payment
intent meet: each writes its row first, so the second waits for the first, and a reversal that
came first is taken back by the grant.

Revision ID: 7c3e5b1d9a42
Revises: 2c1c282a91da
Create Date: 2026-12-06 12:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import service.db.metadata

revision: str = "7c3e5b1d9a42"
down_revision: str | None = "2c1c282a91da"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "credit_payment",
        sa.Column("payment_intent_id", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("reversal", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True),
        sa.Column("created_at", service.db.metadata.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("payment_intent_id", name=op.f("pk_credit_payment")),
    )


def downgrade() -> None:
    op.drop_table("credit_payment")
