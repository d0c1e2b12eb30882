"""Counts elicitation lifecycle changes from the rows themselves, once their transaction commits.

Elicitations are created by tool calls and by the "start again" page, completed by webhooks and by
reconciliation, expired lazily, by restarts and by `checkout.session.expired`. Rather than count in
each of those places, the session factory's flushes are watched: a new `Elicitation` row is a
creation, a status change to completed/expired is a completion/expiry, a new `checkout_session_id`
is a Checkout Session created. Counts are held per session and emitted after commit, so a rolled
back transaction counts nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import event, inspect
from sqlalchemy.orm import Session

from service.db.engine import SessionFactory
from service.observability.metrics import ServiceMetrics
from service.paywall.models import Elicitation, ElicitationStatus

_PENDING = "observability_pending_counts"

Count = Callable[[], None]


def observe_elicitations(sessions: SessionFactory, metrics: ServiceMetrics) -> None:
    """Make every session `sessions` creates report elicitation changes to `metrics`.

    The factory gets a sync-session subclass of its own, so listeners never cross app instances.
    """
    base: type[Session] = sessions.kw.get("sync_session_class") or sessions.class_.sync_session_class
    observed = type("ObservedSession", (base,), {})

    def after_flush(session: Session, _context: Any) -> None:
        pending: list[Count] = session.info.setdefault(_PENDING, [])
        for obj in session.new:
            if isinstance(obj, Elicitation):
                pending.append(_bound(metrics.elicitation_created, obj.protocol_era))
                if obj.checkout_session_id is not None:
                    pending.append(_bound(metrics.checkout_created, obj.plan_id))
        for obj in session.dirty:
            if not isinstance(obj, Elicitation):
                continue
            state = inspect(obj)
            status = state.attrs.status.history
            if status.added and status.added[0] != (status.deleted[0] if status.deleted else None):
                if status.added[0] == ElicitationStatus.COMPLETED.value:
                    pending.append(_bound(metrics.elicitation_completed, obj.protocol_era))
                elif status.added[0] == ElicitationStatus.EXPIRED.value:
                    pending.append(_bound(metrics.elicitation_expired, obj.protocol_era))
            checkout = state.attrs.checkout_session_id.history
            if checkout.added and checkout.added[0] is not None and checkout.added != checkout.deleted:
                pending.append(_bound(metrics.checkout_created, obj.plan_id))

    def after_commit(session: Session) -> None:
        for count in session.info.pop(_PENDING, []):
            count()

    def after_rollback(session: Session) -> None:
        session.info.pop(_PENDING, None)

    event.listen(observed, "after_flush", after_flush)
    event.listen(observed, "after_commit", after_commit)
    event.listen(observed, "after_rollback", after_rollback)
    sessions.configure(sync_session_class=observed)


def _bound(count: Callable[[str], None], label: str) -> Count:
    return lambda: count(label)
