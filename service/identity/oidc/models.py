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
