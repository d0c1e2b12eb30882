"""oauth: hashed client secrets and remembered consent

Revision ID: 5d0c7e2a91f3
Revises: a17356bed27b
Create Date: 2026-12-02 08:00:00.000000+00:00
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

import service.db.metadata

revision: str = '5d0c7e2a91f3'
down_revision: str | None = 'a17356bed27b'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('oauth_client', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('client_secret_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True)
        )
    # Registrations made before this revision hold their secret in info_json: keep only its digest.
    clients = sa.table(
        'oauth_client',
        sa.column('client_id', sa.String),
        sa.column('info_json', sa.Text),
        sa.column('client_secret_hash', sa.String),
    )
    connection = op.get_bind()
    for client_id, info_json in connection.execute(sa.select(clients.c.client_id, clients.c.info_json)).all():
        info = json.loads(info_json)
        secret = info.pop('client_secret', None)
        if secret is None:
            continue
        connection.execute(
            clients.update()
            .where(clients.c.client_id == client_id)
            .values(
                info_json=json.dumps(info),
                client_secret_hash=hashlib.sha256(secret.encode()).hexdigest(),
            )
        )

    op.create_table('oauth_consent',
    sa.Column('user_id', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('client_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('redirect_uri_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('redirect_uri', sa.Text(), nullable=False),
    sa.Column('scopes', sa.Text(), nullable=False),
    sa.Column('created_at', service.db.metadata.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['client_id'], ['oauth_client.client_id'], name=op.f('fk_oauth_consent_client_id_oauth_client'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['user_account.id'], name=op.f('fk_oauth_consent_user_id_user_account'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('user_id', 'client_id', 'redirect_uri_hash', name=op.f('pk_oauth_consent'))
    )


def downgrade() -> None:
    # Hashed secrets cannot be restored: confidential clients registered before the downgrade
    # must register again.
    op.drop_table('oauth_consent')
    with op.batch_alter_table('oauth_client', schema=None) as batch_op:
        batch_op.drop_column('client_secret_hash')
