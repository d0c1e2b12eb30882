"""Recording audit events inside the caller's transaction, so they commit or vanish with the change."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import func, insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.models import AuditEvent
from service.db.metadata import utcnow


class AuditKind(StrEnum):
    ELICITATION_CREATED = "elicitation_created"
    PAGE_OPENED = "payment_page_opened"
    IDENTITY_MISMATCH = "identity_mismatch"
    CHECKOUT_CREATED = "checkout_created"
    WEBHOOK_ACCEPTED = "webhook_accepted"
    WEBHOOK_REJECTED = "webhook_rejected"
    ENTITLEMENT_GRANTED = "entitlement_granted"
    ENTITLEMENT_CHANGED = "entitlement_changed"
    COMPLETION_DELIVERED = "completion_delivered"
    RATE_LIMITED = "rate_limited"


async def record(
    session: AsyncSession,
    kind: AuditKind,
    *,
    user_id: str | None = None,
    elicitation_id: str | None = None,
    **detail: Any,
) -> None:
    session.add(
        AuditEvent(
            kind=kind.value,
            user_id=user_id,
            elicitation_id=elicitation_id,
            detail=json.dumps(detail, sort_keys=True, default=str),
        )
    )


async def record_many(session: AsyncSession, kind: AuditKind, details: Sequence[Mapping[str, Any]]) -> None:
    """`record` for many events of one kind about no particular user: one INSERT, no ORM objects
    (a batch of webhooks records one per event)."""
    if not details:
        return
    at = utcnow()
    rows = [
        {
            "at": at,
            "kind": kind.value,
            "user_id": None,
            "elicitation_id": None,
            "detail": json.dumps(detail, sort_keys=True, default=str),
        }
        for detail in details
    ]
    await session.exec(insert(AuditEvent), params=rows)


async def count_recent(session: AsyncSession, kind: AuditKind, user_id: str, window: timedelta) -> int:
    statement = select(func.count()).where(
        col(AuditEvent.kind) == kind.value,
        col(AuditEvent.user_id) == user_id,
        col(AuditEvent.at) >= utcnow() - window,
    )
    return int((await session.exec(statement)).one())
