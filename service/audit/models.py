from __future__ import annotations

from datetime import datetime

from sqlalchemy import Text
from sqlmodel import Field, SQLModel

from service.db.columns import utc_column
from service.db.metadata import utcnow


class AuditEvent(SQLModel, table=True):
    __tablename__ = "audit_event"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(default_factory=utcnow, sa_column=utc_column(index=True))
    kind: str = Field(max_length=64, index=True)
    user_id: str | None = Field(default=None, max_length=40, index=True)
    elicitation_id: str | None = Field(default=None, max_length=64, index=True)
    detail: str = Field(default="{}", sa_type=Text)
