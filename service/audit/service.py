"""Recording audit events inside the caller's transaction, so they commit or vanish with the change."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import Table, func, insert, inspect
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.models import AuditEvent
from service.db.metadata import utcnow

_AUDIT_TABLE: Table = AuditEvent.__table__  # type: ignore[attr-defined]
_AUDIT_INSERT = insert(_AUDIT_TABLE)  # built once: its cache key is memoized on the object


class AuditKind(StrEnum):
    ELICITATION_CREATED = "elicitation_created"
    PAGE_OPENED = "payment_page_opened"
    IDENTITY_MISMATCH = "identity_mismatch"
    CHECKOUT_CREATED = "checkout_created"
    CHECKOUT_ATTEMPT = "checkout_attempt"  # a press of the pay button, counted for its rate limit
    PORTAL_ATTEMPT = "billing_portal_attempt"  # a press of /billing's button, counted likewise
    WEBHOOK_ACCEPTED = "webhook_accepted"
    WEBHOOK_REJECTED = "webhook_rejected"
    ENTITLEMENT_GRANTED = "entitlement_granted"
    ENTITLEMENT_CHANGED = "entitlement_changed"
    COMPLETION_DELIVERED = "completion_delivered"
    RATE_LIMITED = "rate_limited"
    SIGN_IN_FAILED = "sign_in_failed"
    TOKEN_REQUEST_REFUSED = "token_request_refused"  # noqa: S105 - an event kind


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
    """`record` for many events of one kind about no particular user, in one INSERT together with
    the audit rows this transaction still holds as ORM objects (from `record`), which would
    otherwise cost a statement of their own at commit. A batch of webhooks records one per event."""
    pending = sorted(
        (obj for obj in session.new if isinstance(obj, AuditEvent)),
        key=lambda obj: inspect(obj).insert_order,
    )
    rows = [
        {
            "at": obj.at,
            "kind": obj.kind,
            "user_id": obj.user_id,
            "elicitation_id": obj.elicitation_id,
            "detail": obj.detail,
        }
        for obj in pending
    ]
    for obj in pending:
        session.expunge(obj)
    at = utcnow()
    rows.extend(
        {
            "at": at,
            "kind": kind.value,
            "user_id": None,
            "elicitation_id": None,
            "detail": json.dumps(detail, sort_keys=True, default=str),
        }
        for detail in details
    )
    if rows:
        # The table on the transaction's connection, not the entity through the ORM: an ORM bulk
        # INSERT would split rows by which values are None, and cost its bulk machinery besides.
        connection = await session.connection()
        await connection.execute(_AUDIT_INSERT, rows)


async def count_recent(
    session: AsyncSession,
    kind: AuditKind,
    user_id: str,
    window: timedelta,
    *,
    elicitation_id: str | None = None,
) -> int:
    """Events of `kind` for `user_id` (and, if given, `elicitation_id`) within `window` of now."""
    statement = select(func.count()).where(
        col(AuditEvent.kind) == kind.value,
        col(AuditEvent.user_id) == user_id,
        col(AuditEvent.at) >= utcnow() - window,
    )
    if elicitation_id is not None:
        statement = statement.where(col(AuditEvent.elicitation_id) == elicitation_id)
    return int((await session.exec(statement)).one())
