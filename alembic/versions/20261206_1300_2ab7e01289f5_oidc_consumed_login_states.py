"""oidc consumed login states

A sign-in's login cookie stayed valid for its ten minutes however often its state came back to
`/oidc/callback`, and each answer was redeemed at the provider with our client's secret.
`oidc_consumed_state` holds the SHA-256 of each state a callback consumed, until its cookie
expired, so each sign-in is redeemed once on any replica.

Revision ID: 2ab7e01289f5
Revises: 7c3e5b1d9a42
Create Date: 2026-12-06 13:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import service.db.metadata

revision: str = "2ab7e01289f5"
down_revision: str | None = "7c3e5b1d9a42"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "oidc_consumed_state",
        sa.Column("state_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("expires_at", service.db.metadata.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("state_hash", name=op.f("pk_oidc_consumed_state")),
    )
    with op.batch_alter_table("oidc_consumed_state", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_oidc_consumed_state_expires_at"), ["expires_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("oidc_consumed_state", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_oidc_consumed_state_expires_at"))
    op.drop_table("oidc_consumed_state")
