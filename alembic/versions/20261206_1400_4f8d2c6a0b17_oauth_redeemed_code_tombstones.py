"""oauth redeemed code tombstones

Redeeming an authorization code deleted its row, so a replay of the code was refused but the tokens
its first redemption issued stayed valid. A redeemed code now keeps its row, marked with
`redeemed_at` and the `grant_id` it started, until retention prunes it, so a replay can revoke
that grant (RFC 6749 §4.1.2).

Revision ID: 4f8d2c6a0b17
Revises: 2ab7e01289f5
Create Date: 2026-12-06 14:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import service.db.metadata

revision: str = "4f8d2c6a0b17"
down_revision: str | None = "2ab7e01289f5"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("oauth_authorization_code", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("redeemed_at", service.db.metadata.UTCDateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(sa.Column("grant_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))


def downgrade() -> None:
    # Tombstones would read as unredeemed codes without these columns: drop them first.
    op.execute(sa.text("DELETE FROM oauth_authorization_code WHERE redeemed_at IS NOT NULL"))
    with op.batch_alter_table("oauth_authorization_code", schema=None) as batch_op:
        batch_op.drop_column("grant_id")
        batch_op.drop_column("redeemed_at")
