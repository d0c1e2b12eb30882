"""oauth client registration bounds

`/register` refuses registrations past a deployment-wide number per hour, counted from
`oauth_client.created_at`; retention deletes clients registered long ago that no consent,
authorization code or token names. Those lookups, and the cascade from a deleted client to its
consents and codes, each get an index.

Revision ID: 187f75a3f1ed
Revises: 4f8d2c6a0b17
Create Date: 2026-12-06 15:00:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "187f75a3f1ed"
down_revision: str | None = "4f8d2c6a0b17"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "oauth_client": ("ix_oauth_client_created_at", "created_at"),
    "oauth_consent": ("ix_oauth_consent_client_id", "client_id"),
    "oauth_authorization_code": ("ix_oauth_authorization_code_client_id", "client_id"),
    "token": ("ix_token_client_id", "client_id"),
}


def upgrade() -> None:
    for table, (name, column) in INDEXES.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.create_index(name, [column], unique=False)


def downgrade() -> None:
    for table, (name, _) in reversed(INDEXES.items()):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(name)
