"""The table mapping an external provider's identities to our user accounts."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from service.db.columns import utc_column
from service.db.metadata import utcnow


class ExternalIdentity(SQLModel, table=True):
    __tablename__ = "external_identity"

    issuer: str = Field(primary_key=True, max_length=255)
    subject: str = Field(primary_key=True, max_length=255)
    user_id: str = Field(foreign_key="user_account.id", ondelete="CASCADE", max_length=40, index=True)
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())


class ConsumedLoginState(SQLModel, table=True):
    """A sign-in's `state` once a callback presented it, so each sign-in is redeemed once on any replica.

    Keyed by the state's SHA-256 (hex), a fixed 64 characters; a row is useless once its login
    cookie has expired (`expires_at`), and retention deletes it then.
    """

    __tablename__ = "oidc_consumed_state"

    state_hash: str = Field(primary_key=True, max_length=64)
    expires_at: datetime = Field(sa_column=utc_column(index=True))
