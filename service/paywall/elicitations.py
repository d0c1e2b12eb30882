"""Elicitation records: create or reuse, look up, complete, expire. Callers own the transaction."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import bindparam, delete
from sqlalchemy.exc import IntegrityError
from sqlmodel import and_, col, func, or_, select
from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.service import AuditKind, record
from service.billing.stripe_sync.payment_requests import OpenRequests
from service.db.metadata import utcnow
from service.db.upsert import upsert_into
from service.observability.metrics import ServiceMetrics
from service.paywall.models import Elicitation, ElicitationDelivery, ElicitationStatus

DEFAULT_SESSIONS_OWED = 10
# Completed elicitations' rows are kept this long for the sweep, then deleted.
COMPLETED_DELIVERIES_KEPT = timedelta(hours=1)


class RateLimited(Exception):
    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


@dataclass(frozen=True)
class ElicitationRequest:
    user_id: str
    plan_id: str
    tool_name: str
    protocol_era: str
    mcp_session_id: str | None
    ttl: timedelta
    max_new_per_hour: int
    # Sessions kept owed this elicitation's notice; the oldest is forgotten past this.
    max_sessions_owed: int = DEFAULT_SESSIONS_OWED


_ID_BYTES = 24
# What `new_elicitation_id` makes: "el_" and the 32 URL-safe base64 characters of 24 random bytes.
_ID_SHAPE = re.compile(r"el_[A-Za-z0-9_-]{32}")


def new_elicitation_id() -> str:
    return f"el_{secrets.token_urlsafe(_ID_BYTES)}"


def is_elicitation_id(value: str) -> bool:
    """Whether `value` has the shape of our ids: anything else names no elicitation, and is never
    sent to the database (where a NUL byte, say, is an error rather than a miss)."""
    return _ID_SHAPE.fullmatch(value) is not None


async def _open_for(session: AsyncSession, user_id: str, plan_id: str) -> Elicitation | None:
    result = await session.exec(
        select(Elicitation).where(
            col(Elicitation.user_id) == user_id,
            col(Elicitation.plan_id) == plan_id,
            col(Elicitation.status) == ElicitationStatus.OPEN.value,
        )
    )
    return result.first()


async def open_or_reuse(
    session: AsyncSession, request: ElicitationRequest, metrics: ServiceMetrics | None = None
) -> tuple[Elicitation, bool]:
    """The user's open elicitation for this plan, or a new one; (elicitation, created).

    `metrics` counts what this decided; the callers commit right after.
    """
    now = utcnow()
    existing = await _open_for(session, request.user_id, request.plan_id)
    if existing is not None and existing.expires_at > now:
        await _remember_session(session, existing.id, request.mcp_session_id, request.max_sessions_owed)
        return existing, False
    if existing is not None:
        existing.status = ElicitationStatus.EXPIRED.value
        session.add(existing)
        await session.flush()

    recent = await session.exec(
        select(func.count()).where(
            col(Elicitation.user_id) == request.user_id,
            col(Elicitation.created_at) >= now - timedelta(hours=1),
        )
    )
    if int(recent.one()) >= request.max_new_per_hour:
        raise RateLimited("too many payment links requested in the last hour", retry_after_seconds=3600)

    elicitation = Elicitation(
        id=new_elicitation_id(),
        user_id=request.user_id,
        plan_id=request.plan_id,
        tool_name=request.tool_name,
        mcp_session_id=request.mcp_session_id,
        protocol_era=request.protocol_era,
        expires_at=now + request.ttl,
    )
    try:
        async with session.begin_nested():
            session.add(elicitation)
    except IntegrityError:
        # Another call created it between our read and our insert: use theirs.
        raced = await _open_for(session, request.user_id, request.plan_id)
        if raced is None:
            raise
        await _remember_session(session, raced.id, request.mcp_session_id, request.max_sessions_owed)
        if existing is not None and metrics is not None:
            metrics.elicitation_expired(existing.protocol_era, existing.plan_id)
        return raced, False
    await _remember_session(session, elicitation.id, request.mcp_session_id, request.max_sessions_owed)
    await record(
        session,
        AuditKind.ELICITATION_CREATED,
        user_id=request.user_id,
        elicitation_id=elicitation.id,
        plan=request.plan_id,
        tool=request.tool_name,
        era=request.protocol_era,
    )
    if metrics is not None:
        if existing is not None:
            metrics.elicitation_expired(existing.protocol_era, existing.plan_id)
        metrics.elicitation_created(elicitation.protocol_era, elicitation.plan_id)
    return elicitation, True


async def _remember_session(
    session: AsyncSession, elicitation_id: str, mcp_session_id: str | None, bound: int
) -> None:
    """Owe `mcp_session_id` this elicitation's notice, forgetting the sessions owed it longest
    beyond `bound` (sessions end; their rows would otherwise pile up)."""
    if mcp_session_id is None:
        return
    if await session.get(ElicitationDelivery, (elicitation_id, mcp_session_id)) is not None:
        return
    owed = await session.exec(
        select(ElicitationDelivery.mcp_session_id)
        .where(
            col(ElicitationDelivery.elicitation_id) == elicitation_id,
            col(ElicitationDelivery.delivered_at).is_(None),
        )
        .order_by(col(ElicitationDelivery.created_at).desc(), col(ElicitationDelivery.mcp_session_id))
    )
    forgotten = list(owed.all())[max(0, bound - 1) :]
    if forgotten:
        await session.exec(
            delete(ElicitationDelivery).where(
                col(ElicitationDelivery.elicitation_id) == elicitation_id,
                col(ElicitationDelivery.mcp_session_id).in_(forgotten),
            )
        )
    # Concurrent unpaid calls in one session race to owe it the notice; the loser's insert is a
    # no-op rather than an IntegrityError that would fail its tool call.
    await session.exec(
        upsert_into(session, ElicitationDelivery)
        .values(elicitation_id=elicitation_id, mcp_session_id=mcp_session_id, created_at=utcnow())
        .on_conflict_do_nothing(index_elements=["elicitation_id", "mcp_session_id"])
    )


async def prune_deliveries(session: AsyncSession) -> None:
    """Delete delivery rows nobody will read again: delivered ones, those of expired elicitations,
    and those of elicitations completed longer than `COMPLETED_DELIVERIES_KEPT` ago."""
    finished = select(Elicitation.id).where(
        or_(
            col(Elicitation.status) == ElicitationStatus.EXPIRED.value,
            and_(
                col(Elicitation.status) == ElicitationStatus.COMPLETED.value,
                col(Elicitation.completed_at) < utcnow() - COMPLETED_DELIVERIES_KEPT,
            ),
        )
    )
    await session.exec(
        delete(ElicitationDelivery).where(
            or_(
                col(ElicitationDelivery.delivered_at).is_not(None),
                col(ElicitationDelivery.elicitation_id).in_(finished),
            )
        )
    )


# A user's open elicitations, read earlier in the same transaction.
OpenElicitations = OpenRequests[Elicitation]


# Built once, on the path that ends in a completion notice: SQLAlchemy memoizes a statement's cache
# key on the object, so reusing it skips building and keying the clause on every checkout.
_NAMED_AND_OPEN = select(Elicitation).where(
    or_(
        col(Elicitation.id) == bindparam("elicitation_id"),
        and_(
            col(Elicitation.user_id) == bindparam("user_id"),
            col(Elicitation.status) == ElicitationStatus.OPEN.value,
        ),
    )
)


async def named_and_open(
    session: AsyncSession, elicitation_id: str, user_id: str
) -> tuple[Elicitation | None, OpenElicitations]:
    """The elicitation `elicitation_id` (whoever's it is) and the user's open ones, in one statement.

    A completed checkout needs both: the one it names, to check it, and the open ones, to complete
    those the new subscription satisfies. One read instead of two is a round trip less on the path
    that ends in the completion notice.
    """
    open_value = ElicitationStatus.OPEN.value
    result = await session.exec(
        _NAMED_AND_OPEN, params={"elicitation_id": elicitation_id, "user_id": user_id}
    )
    rows = list(result.all())
    named = next((row for row in rows if row.id == elicitation_id), None)
    still_open = [row for row in rows if row.user_id == user_id and row.status == open_value]
    return named, OpenElicitations(user_id, still_open)


async def open_elicitations(
    session: AsyncSession, user_id: str, known_open: OpenElicitations | None = None
) -> list[Elicitation]:
    """The user's open elicitations: as this transaction already read them (`known_open`), or now.

    One that another transaction opens after the earlier read is missed, just as it would be if
    it were opened after a read made now: either way its caller's next try finds the user entitled.
    """
    if known_open is not None and known_open.user_id == user_id:
        return [item for item in known_open.items if item.status == ElicitationStatus.OPEN.value]
    result = await session.exec(
        select(Elicitation).where(
            col(Elicitation.user_id) == user_id, col(Elicitation.status) == ElicitationStatus.OPEN.value
        )
    )
    return list(result.all())


async def complete(session: AsyncSession, elicitations: Iterable[Elicitation]) -> None:
    now = utcnow()
    for elicitation in elicitations:
        elicitation.status = ElicitationStatus.COMPLETED.value
        elicitation.completed_at = now
        session.add(elicitation)
    await session.flush()


async def undelivered(session: AsyncSession, elicitation_ids: Iterable[str]) -> list[ElicitationDelivery]:
    ids = list(elicitation_ids)
    if not ids:
        return []
    result = await session.exec(
        select(ElicitationDelivery)
        .where(
            col(ElicitationDelivery.elicitation_id).in_(ids), col(ElicitationDelivery.delivered_at).is_(None)
        )
        .with_for_update(skip_locked=True)
    )
    return list(result.all())


async def owed_to_sessions(session: AsyncSession, mcp_session_ids: list[str]) -> list[ElicitationDelivery]:
    """Completed elicitations whose notice these sessions have not had yet."""
    result = await session.exec(
        select(ElicitationDelivery)
        .join(Elicitation, col(Elicitation.id) == col(ElicitationDelivery.elicitation_id))
        .where(
            col(ElicitationDelivery.mcp_session_id).in_(mcp_session_ids),
            col(ElicitationDelivery.delivered_at).is_(None),
            col(Elicitation.status) == ElicitationStatus.COMPLETED.value,
        )
        .with_for_update(skip_locked=True, of=ElicitationDelivery)
    )
    return list(result.all())


async def restart(
    session: AsyncSession,
    old: Elicitation,
    *,
    ttl: timedelta,
    max_new_per_hour: int,
    metrics: ServiceMetrics | None = None,
) -> Elicitation:
    """Replace an expired elicitation; the sessions owed the old one's notice are owed the new one's."""
    if old.status == ElicitationStatus.OPEN.value:
        old.status = ElicitationStatus.EXPIRED.value
        session.add(old)
        await session.flush()
        if metrics is not None:
            metrics.elicitation_expired(old.protocol_era, old.plan_id)
    fresh, _ = await open_or_reuse(
        session,
        ElicitationRequest(
            user_id=old.user_id,
            plan_id=old.plan_id,
            tool_name=old.tool_name,
            protocol_era=old.protocol_era,
            mcp_session_id=None,
            ttl=ttl,
            max_new_per_hour=max_new_per_hour,
        ),
        metrics,
    )
    owed = await session.exec(
        select(ElicitationDelivery).where(col(ElicitationDelivery.elicitation_id) == old.id)
    )
    for delivery in owed.all():
        await _remember_session(session, fresh.id, delivery.mcp_session_id, DEFAULT_SESSIONS_OWED)
    return fresh
