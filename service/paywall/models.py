"""Elicitation records: the server-side truth behind every `/pay/{id}` link."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import Index, text
from sqlmodel import Field, SQLModel

from service.db.columns import utc_column
from service.db.metadata import utcnow


class ElicitationStatus(StrEnum):
    OPEN = "open"
    COMPLETED = "completed"
    EXPIRED = "expired"


class Elicitation(SQLModel, table=True):
    __tablename__ = "elicitation"
    __table_args__ = (
        Index("ix_elicitation_user_id_status", "user_id", "status"),
        # At most one open elicitation per user and plan, even when two calls race to create it.
        Index(
            "uq_elicitation_open_user_plan",
            "user_id",
            "plan_id",
            unique=True,
            sqlite_where=text("status = 'open'"),
            postgresql_where=text("status = 'open'"),
        ),
    )

    id: str = Field(primary_key=True, max_length=64)
    user_id: str = Field(foreign_key="user_account.id", ondelete="CASCADE", max_length=40)
    plan_id: str = Field(max_length=64)
    tool_name: str = Field(max_length=200)
    mcp_session_id: str | None = Field(default=None, max_length=200)
    protocol_era: str = Field(max_length=16)
    status: str = Field(default=ElicitationStatus.OPEN.value, max_length=16)
    checkout_session_id: str | None = Field(default=None, max_length=255)
    checkout_attempt: int = 0
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    expires_at: datetime = Field(sa_column=utc_column())
    completed_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))

    @property
    def is_open(self) -> bool:
        return self.status == ElicitationStatus.OPEN.value


class ElicitationDelivery(SQLModel, table=True):
    """A legacy MCP session that was handed this elicitation and is owed its completion notice."""

    __tablename__ = "elicitation_delivery"

    elicitation_id: str = Field(
        primary_key=True, foreign_key="elicitation.id", ondelete="CASCADE", max_length=64
    )
    mcp_session_id: str = Field(primary_key=True, max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    delivered_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
