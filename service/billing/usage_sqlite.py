"""Paid-call decisions on SQLite, a batch at a time, run in place on a connection of their own.

Through the async engine every statement is several hand-offs to the aiosqlite thread and back, and
while the event loop is busy each way back waits for the interpreter lock: a decision took
milliseconds for a few statements that SQLite runs in microseconds. Here the batch's transaction
runs synchronously on the caller's thread, while the caller holds the engine's one pooled
connection, so no transaction of this process is open meanwhile; the connection never waits for
the write lock (`busy_timeout=0`), so when another process holds it the decision fails with `Busy`
at once and the caller takes the async path instead of blocking the loop.

The statements are those of `service.billing.usage` (same rows, same conditions, same order): the
call's usage row (unique per user and call key) and the counter or balance it moves commit
together or not at all, and a retried call finds its row and passes without counting again.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from service.billing.models import Subscription
from service.billing.plans import MeteredPrice, Plan
from service.billing.subscriptions import grants_access
from service.billing.usage import (
    FUNDED_BY_CREDIT,
    FUNDED_BY_METER,
    FUNDED_BY_PLAN,
    REFUSED,
    RETRIED,
    Decision,
    PaidCall,
    Refused,
    new_usage_id,
    period_of,
    plan_call_columns,
)
from service.db.metadata import utcnow

logger = logging.getLogger(__name__)


class Busy(Exception):
    """Another connection holds SQLite's write lock: nothing was decided."""


@dataclass(frozen=True)
class SqliteAttempt:
    call: PaidCall
    counted_plan_ids: tuple[str, ...]  # the user's plans for the tool that count calls
    subscription: Subscription | None = None  # one of them, cached; None: read it here


Decided = TypeVar("Decided")
PlanLookup = Callable[[str], Plan | None]
MeteredLookup = Callable[[str], MeteredPrice | None]


def _stored(value: datetime) -> str:
    """A timestamp as SQLAlchemy's SQLite `DateTime` stores it (UTC, no offset)."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def _loaded(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value).replace(tzinfo=UTC)


_CLAIM = (
    "INSERT INTO usage_record (id, user_id, call_key, tool, funding, plan_id, subscription_id, period,"
    " customer_id, event_name, unit_amount, currency, created_at, report_attempts, next_report_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)"
    " ON CONFLICT (user_id, call_key) DO NOTHING RETURNING id"
)
_SPEND = "UPDATE credit_balance SET balance = balance - 1, updated_at = ? WHERE user_id = ? AND balance >= 1"
_SPEND_ENTRY = (
    "INSERT INTO credit_entry (user_id, delta, reason, source, created_at) VALUES (?, -1, 'spend', ?, ?)"
)
_SUBSCRIPTIONS = (
    "SELECT id, customer_id, plan_id, status, cancel_at_period_end, current_period_end, past_due_since,"
    " access_revoked_reason, created_at FROM subscription WHERE user_id = ? AND plan_id IN ({marks})"
    " ORDER BY created_at DESC"
)
_RAISE_USED = "UPDATE usage_counter SET used = used + 1 WHERE subscription_id = ? AND period = ? AND used < ?"
_FIRST_USED = (
    "INSERT INTO usage_counter (subscription_id, period, user_id, used) VALUES (?, ?, ?, 1)"
    " ON CONFLICT (subscription_id, period) DO NOTHING RETURNING used"
)
_TO_METER = (
    "UPDATE usage_record SET funding = ?, customer_id = ?, event_name = ?, unit_amount = ?, currency = ?,"
    " next_report_at = ? WHERE id = ?"
)


class SqliteDecisions:
    """Decides batches of paid calls over one synchronous connection (see the module docstring)."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        plan_of: PlanLookup,
        metered_price_of: MeteredLookup,
        *,
        grace: timedelta,
    ) -> None:
        self._connect = connect
        self._db_connection: sqlite3.Connection | None = None
        self._plan_of = plan_of
        self._metered_price_of = metered_price_of
        self._grace = grace

    def close(self) -> None:
        if self._db_connection is not None:
            self._db_connection.close()
            self._db_connection = None

    def decide(self, attempts: Sequence[SqliteAttempt]) -> list[Decision | Exception]:
        """One transaction for the batch, each decision in a savepoint, users in one order; when
        the batch fails as a whole, each decision alone, so only the failing one fails. `Busy`
        when nothing was decided; once some were, those left are answered `Busy`."""
        db = self._db()
        if len(attempts) == 1:
            return [self._alone(db, attempts[0])]
        try:
            return list(self._transaction(db, lambda: self._decide_all(db, attempts)))
        except Busy:
            raise
        except Exception:
            # Which one failed is unknown (a constraint, a full disk): each alone, so only it fails.
            logger.info("%d paid-call decisions failed together; deciding each alone", len(attempts))
        results: list[Decision | Exception] = []
        busy: Busy | None = None
        for attempt in attempts:
            if busy is not None:
                results.append(busy)
                continue
            try:
                results.append(self._alone(db, attempt))
            except Busy as exc:
                if not results:
                    raise  # nothing committed: the caller decides them all elsewhere
                # Those decided stand (deciding them again would take them for retries); the
                # caller decides the rest, each answered `Busy` here, elsewhere.
                busy = exc
                results.append(exc)
            except Exception as exc:
                results.append(exc)
        return results

    def _db(self) -> sqlite3.Connection:
        if self._db_connection is None:
            self._db_connection = self._connect()
        return self._db_connection

    def _alone(self, db: sqlite3.Connection, attempt: SqliteAttempt) -> Decision:
        """A transaction per step, rolled back by `Refused`: no savepoints on the lone call's path."""
        if attempt.counted_plan_ids:
            try:
                decided = self._transaction(db, lambda: self._plan_call(db, attempt))
                if decided is not None:
                    return decided
            except Refused:
                pass
        try:
            return self._transaction(db, lambda: self._spend_credit(db, attempt))
        except Refused:
            return REFUSED

    @staticmethod
    def _transaction(db: sqlite3.Connection, decide: Callable[[], Decided]) -> Decided:
        """`decide` in a transaction that takes the write lock at once, or `Busy`; rolled back
        when `decide` raises."""
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise Busy from exc
            raise
        try:
            decided = decide()
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return decided

    def _decide_all(self, db: sqlite3.Connection, attempts: Sequence[SqliteAttempt]) -> list[Decision]:
        order = sorted(range(len(attempts)), key=lambda index: (attempts[index].call.user_id, index))
        results = [REFUSED] * len(attempts)
        for index in order:
            attempt = attempts[index]
            if attempt.counted_plan_ids:
                decided = self._savepoint(db, self._plan_call, attempt)
                if decided is not None and decided.allowed:
                    results[index] = decided
                    continue
            results[index] = self._savepoint(db, self._spend_credit, attempt) or REFUSED
        return results

    @staticmethod
    def _savepoint(
        db: sqlite3.Connection,
        decide: Callable[[sqlite3.Connection, SqliteAttempt], Decision | None],
        attempt: SqliteAttempt,
    ) -> Decision | None:
        """`decide` in a savepoint, rolled back when it raises `Refused` (`REFUSED`)."""
        db.execute("SAVEPOINT decision")
        try:
            allowed = decide(db, attempt)
        except Refused:
            db.execute("ROLLBACK TO decision")
            db.execute("RELEASE decision")
            return REFUSED
        except BaseException:
            db.execute("ROLLBACK TO decision")
            db.execute("RELEASE decision")
            raise
        db.execute("RELEASE decision")
        return allowed

    @staticmethod
    def _claim(db: sqlite3.Connection, call: PaidCall, funding: str, **values: object) -> str | None:
        usage_id = new_usage_id()
        now = _stored(utcnow())
        next_report_at = values.get("next_report_at")
        row = db.execute(
            _CLAIM,
            (
                usage_id,
                call.user_id,
                call.call_key,
                call.tool,
                funding,
                values.get("plan_id"),
                values.get("subscription_id"),
                values.get("period"),
                values.get("customer_id"),
                values.get("event_name"),
                values.get("unit_amount"),
                values.get("currency"),
                now,
                _stored(next_report_at) if isinstance(next_report_at, datetime) else None,
            ),
        ).fetchone()
        return str(row[0]) if row is not None else None

    def _spend_credit(self, db: sqlite3.Connection, attempt: SqliteAttempt) -> Decision:
        """The statements of `usage.spend_credit`: the usage row, the conditional decrement, the
        ledger entry."""
        call = attempt.call
        usage_id = self._claim(db, call, FUNDED_BY_CREDIT)
        if usage_id is None:
            return RETRIED  # a call paid before
        now = _stored(utcnow())
        if db.execute(_SPEND, (now, call.user_id)).rowcount != 1:
            raise Refused
        db.execute(_SPEND_ENTRY, (call.user_id, f"usage:{usage_id}", now))
        return Decision(allowed=True, funding=FUNDED_BY_CREDIT, usage_id=usage_id)

    def _entitling_subscription(
        self, db: sqlite3.Connection, call: PaidCall, plan_ids: Sequence[str]
    ) -> Subscription | None:
        rows = db.execute(
            _SUBSCRIPTIONS.format(marks=", ".join("?" * len(plan_ids))), (call.user_id, *plan_ids)
        ).fetchall()
        now = utcnow()
        for row in rows:
            subscription = Subscription(
                id=row[0],
                user_id=call.user_id,
                customer_id=row[1],
                plan_id=row[2],
                status=row[3],
                cancel_at_period_end=bool(row[4]),
                current_period_end=_loaded(row[5]),
                past_due_since=_loaded(row[6]),
                access_revoked_reason=row[7],
                created_at=_loaded(row[8]) or utcnow(),
            )
            if grants_access(subscription, grace=self._grace, now=now):
                return subscription
        return None

    def _plan_call(self, db: sqlite3.Connection, attempt: SqliteAttempt) -> Decision | None:
        """Count (or meter) the call under the user's subscription to one of its counting plans;
        None when the cache was behind (no longer subscribed), `Refused` past a blocking quota."""
        call = attempt.call
        subscription = attempt.subscription or self._entitling_subscription(
            db, call, attempt.counted_plan_ids
        )
        plan = self._plan_of(subscription.plan_id) if subscription is not None else None
        if subscription is None or plan is None:
            return None
        assert plan.included_calls is not None, "only plans that count calls come here"
        period = period_of(subscription)
        values, billing = plan_call_columns(subscription, period, plan, self._metered_price_of(call.tool))
        if plan.included_calls == 0:  # pay as you go: every call metered, nothing to count
            if not billing:
                raise Refused
            usage_id = self._claim(db, call, FUNDED_BY_METER, **values, **billing)
            if usage_id is None:
                return RETRIED
            return Decision(allowed=True, funding=FUNDED_BY_METER, usage_id=usage_id)
        usage_id = self._claim(db, call, FUNDED_BY_PLAN, **values)
        if usage_id is None:
            return RETRIED  # a call counted before
        counter = (subscription.id, period)
        if db.execute(_RAISE_USED, (*counter, plan.included_calls)).rowcount == 1:
            return Decision(allowed=True, funding=FUNDED_BY_PLAN, usage_id=usage_id)
        if db.execute(_FIRST_USED, (*counter, subscription.user_id)).fetchone() is not None:
            return Decision(allowed=True, funding=FUNDED_BY_PLAN, usage_id=usage_id)
        if not billing:
            raise Refused
        db.execute(
            _TO_METER,
            (
                FUNDED_BY_METER,
                billing["customer_id"],
                billing["event_name"],
                billing["unit_amount"],
                billing["currency"],
                _stored(utcnow()),
                usage_id,
            ),
        )
        return Decision(allowed=True, funding=FUNDED_BY_METER, usage_id=usage_id)
