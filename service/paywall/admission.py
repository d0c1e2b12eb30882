"""Whether a paid call may run, and recording how it is paid, in one transaction.

An unlimited plan lets the call through from the entitlement cache, without a database round trip.
A plan with included calls counts the call (or meters it past them, for overage `meter`); a call
no plan covers, or past a `block` quota, spends one of the user's credits. Whatever funds the call
is recorded in the transaction that decides it, once per call key (`call_key`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel.ext.asyncio.session import AsyncSession

from service.billing.models import Subscription
from service.billing.plans import PlanCatalog
from service.billing.usage import (
    REFUSED,
    Decision,
    PaidCall,
    Refused,
    entitling_subscription,
    record_plan_call,
    release_call,
    spend_credit,
)
from service.billing.usage_postgres import PostgresDecisions
from service.billing.usage_sqlite import Busy, SqliteAttempt, SqliteDecisions
from service.db.engine import SessionFactory, checked_out_connections, open_sqlite_connection, sqlite_file
from service.db.group_commit import GroupCommit
from service.db.wal import WalCheckpoints
from service.paywall.entitlements import Entitlements

logger = logging.getLogger(__name__)

# The `_meta` key under which a client names a call, so that a retry of it is not charged again.
IDEMPOTENCY_KEY_META = "paid-mcp/idempotency-key"
IDEMPOTENCY_KEY_MAX_LENGTH = 255


class InvalidIdempotencyKey(ValueError):
    """The client's idempotency key is not 1-255 printable ASCII characters."""


def idempotency_key(meta: Mapping[str, Any] | None) -> str | None:
    """The client's name for this call from the request's `_meta`; None when it gave none."""
    value = None if meta is None else meta.get(IDEMPOTENCY_KEY_META)
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= IDEMPOTENCY_KEY_MAX_LENGTH
        or not (value.isascii() and value.isprintable())
    ):
        raise InvalidIdempotencyKey(
            f"_meta {IDEMPOTENCY_KEY_META!r} must be 1 to {IDEMPOTENCY_KEY_MAX_LENGTH} printable "
            "ASCII characters"
        )
    return value


def call_key(
    *,
    session_id: str | None,
    request_id: str,
    tool: str,
    arguments: Mapping[str, Any],
    idempotency_key: str | None = None,
) -> str:
    """The call's identity across retries and replicas: what the client sent, not where it landed.

    - A key the client sent in `_meta` names the call, whatever the connection or request id.
    - Otherwise, in a 2025-11-25 session, the session and request id do: the protocol forbids
      reusing a request id within a session, so the pair is one call for the session's life.
    - Otherwise (2026-07-28 has no session, and clients start their request ids afresh on each
      connection) the request is a call of its own: a retry without a key is charged again,
      where treating equal request ids as one call would let a client repeat calls for free.
    """
    if idempotency_key is not None:
        material: list[Any] = ["key", idempotency_key, tool, arguments]
    elif session_id:
        material = ["session", session_id, request_id, tool, arguments]
    else:
        material = ["request", secrets.token_hex(16)]
    encoded = json.dumps(material, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    # Plans the user has for this tool whose included calls are used up this period.
    exhausted_plan_ids: frozenset[str] = frozenset()
    # The usage row this decision recorded (what `release` takes back); None when it recorded
    # nothing: an unlimited plan, a refusal, or a retry of a call recorded before.
    usage_id: str | None = None
    retried: bool = False  # a call recorded before: paid once, it is not run again


ALLOWED = Verdict(allowed=True)


@dataclass(frozen=True)
class _Attempt:
    call: PaidCall
    counted_plan_ids: tuple[str, ...]  # the user's plans for the tool that count calls
    # The subscription to one of them from the entitlement cache; None: read it in the decision.
    subscription: Subscription | None = None


class Admission:
    """On SQLite, decisions that write go through a group commit: calls decided while a transaction
    commits share the next one (each in its own savepoint), so concurrent paid calls do not queue
    for SQLite's one writer each. A lone call takes a transaction of its own, without savepoints. On
    a file a batch is decided in place by `SqliteDecisions` while no transaction of this process is
    open, and through the async engine only when another process holds the write lock (ADR 7).
    On PostgreSQL each call is decided on its own, in one statement on a driver connection
    (`PostgresDecisions`, ADR 10)."""

    def __init__(
        self,
        sessions: SessionFactory,
        catalog: PlanCatalog,
        entitlements: Entitlements,
        *,
        wal: WalCheckpoints | None = None,
        postgres: PostgresDecisions | None = None,
    ) -> None:
        self._sessions = sessions
        self._catalog = catalog
        self._entitlements = entitlements
        self._commits: GroupCommit[_Attempt, Decision] = GroupCommit(self._decide_batch)
        self._engine = sessions().bind
        self._sqlite: SqliteDecisions | None = None
        self._postgres = postgres
        # With `wal`, the log is checkpointed off the event loop's thread, not by its commits here.
        self._wal = wal
        if isinstance(self._engine, AsyncEngine) and sqlite_file(self._engine) is not None:
            engine = self._engine
            self._sqlite = SqliteDecisions(
                lambda: open_sqlite_connection(engine, automatic_checkpoints=wal is None),
                catalog.get,
                catalog.metered_price,
                grace=entitlements.grace,
            )
        elif postgres is None and self._engine is not None and self._engine.dialect.name == "postgresql":
            raise ValueError("on PostgreSQL, paid calls are decided by PostgresDecisions: pass one")

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()

    async def unlimited(self, user_id: str, plan_ids: frozenset[str]) -> bool:
        """Whether the user has one of `plan_ids` that lets calls through uncounted, as the
        entitlement cache says: such a call needs no call key and no decision."""
        return self._counting(await self._entitlements.plans_of(user_id) & plan_ids) is None

    def _counting(self, entitled: frozenset[str]) -> list[str] | None:
        """The entitled plans, in order, when each counts calls; None when one lets calls through
        uncounted (or is no longer in the catalog)."""
        counted: list[str] = []
        for plan_id in sorted(entitled):
            plan = self._catalog.get(plan_id)
            if plan is None or not plan.counts_calls:
                return None
            counted.append(plan_id)
        return counted

    async def admit(self, call: PaidCall, plan_ids: frozenset[str], *, fresh: bool = False) -> Verdict:
        counted = self._counting(await self._entitlements.plans_of(call.user_id, fresh=fresh) & plan_ids)
        if counted is None:
            return ALLOWED
        if not counted and not fresh and self._entitlements.known_without_credits(call.user_id):
            return Verdict(allowed=False)
        subscription = (
            None if fresh or not counted else self._entitlements.cached_subscription(call.user_id, counted)
        )
        attempt = _Attempt(call, tuple(counted), subscription)
        if self._postgres is not None:
            decided = await self._decide_on_postgres(self._postgres, attempt)
        else:
            decided = await self._commits.submit(attempt)
        if decided.allowed:
            return Verdict(allowed=True, usage_id=decided.usage_id, retried=decided.usage_id is None)
        self._entitlements.saw_without_credits(call.user_id)
        return Verdict(allowed=False, exhausted_plan_ids=frozenset(counted))

    async def release(self, user_id: str, usage_id: str) -> None:
        """Take back what paid for a call that did not complete (`usage.release_call`)."""
        async with self._sessions() as session, session.begin():
            funding = await release_call(session, user_id, usage_id)
        if funding == "credit":
            self._entitlements.saw_credits(user_id)

    async def _decide_batch(self, attempts: Sequence[_Attempt]) -> list[Decision | Exception]:
        """A group commit's batch, on SQLite: in place on a file, else (in memory, or the write lock
        held by another process) through the async engine."""
        if self._sqlite is not None and isinstance(self._engine, AsyncEngine):
            decided = await self._decide_in_place(self._sqlite, self._engine, attempts)
            if decided is not None:
                # Those the write lock stopped partway through the batch: through the pool.
                for index, result in enumerate(decided):
                    if isinstance(result, Busy):
                        try:
                            decided[index] = await self._decide_alone(attempts[index])
                        except Exception as exc:
                            decided[index] = exc
                return decided
        if len(attempts) == 1:
            return [await self._decide_alone(attempts[0])]
        try:
            return list(await self._decide_together(attempts))
        except Exception:
            # Which one failed is unknown (a constraint, a lock another process held too long):
            # each alone, so only that one fails.
            logger.info("%d paid-call decisions failed together; deciding each alone", len(attempts))
        results: list[Decision | Exception] = []
        for attempt in attempts:
            try:
                results.append(await self._decide_alone(attempt))
            except Exception as exc:
                results.append(exc)
        return results

    async def _decide_together(self, attempts: Sequence[_Attempt]) -> list[Decision]:
        """One transaction, each decision in a savepoint, users in one order (as `SqliteDecisions`
        takes them)."""
        order = sorted(range(len(attempts)), key=lambda index: (attempts[index].call.user_id, index))
        results = [REFUSED] * len(attempts)
        async with self._sessions() as session, session.begin():
            for index in order:
                attempt = attempts[index]
                if attempt.counted_plan_ids:
                    try:
                        async with session.begin_nested():
                            decided = await self._plan_call(session, attempt)
                        if decided is not None:
                            results[index] = decided
                            continue
                    except Refused:
                        pass
                try:
                    async with session.begin_nested():
                        results[index] = await spend_credit(session, attempt.call)
                except Refused:
                    pass
        return results

    async def _decide_in_place(
        self, sqlite: SqliteDecisions, engine: AsyncEngine, attempts: Sequence[_Attempt]
    ) -> list[Decision | Exception] | None:
        """The batch decided by `SqliteDecisions` while no transaction of this process is open: the
        pool's one connection is idle (nothing can take it while the decision runs without
        yielding) or held here; None when another process holds the write lock."""
        batch = [
            SqliteAttempt(attempt.call, attempt.counted_plan_ids, attempt.subscription)
            for attempt in attempts
        ]
        try:
            if checked_out_connections(engine) == 0:
                return self._decide_sqlite(sqlite, batch)
            async with engine.connect():
                return self._decide_sqlite(sqlite, batch)
        except Busy:
            logger.info(
                "SQLite write lock held elsewhere; deciding %d paid calls through the pool", len(batch)
            )
            return None

    def _decide_sqlite(
        self, sqlite: SqliteDecisions, batch: Sequence[SqliteAttempt]
    ) -> list[Decision | Exception]:
        decided = sqlite.decide(batch)
        if self._wal is not None:
            self._wal.wrote()
        return decided

    async def _decide_alone(self, attempt: _Attempt) -> Decision:
        """A transaction per step, rolled back by `Refused`: no savepoints on the lone call's path."""
        if attempt.counted_plan_ids:
            try:
                async with self._sessions() as session, session.begin():
                    decided = await self._plan_call(session, attempt)
                if decided is not None:
                    return decided
            except Refused:
                pass
        try:
            async with self._sessions() as session, session.begin():
                return await spend_credit(session, attempt.call)
        except Refused:
            return REFUSED

    async def _decide_on_postgres(self, postgres: PostgresDecisions, attempt: _Attempt) -> Decision:
        """No group commit: a decision is one statement (or one short transaction, for a plan that
        counts included calls), and the database serialises what concurrent ones touch."""
        if attempt.counted_plan_ids:
            try:
                decided = await self._plan_call_on_postgres(postgres, attempt)
                if decided is not None:
                    return decided
            except Refused:
                pass
        return await postgres.spend_credit(attempt.call)

    async def _plan_call_on_postgres(self, postgres: PostgresDecisions, attempt: _Attempt) -> Decision | None:
        """Count (or meter) the call under the cached subscription by `PostgresDecisions`; without
        one, `_plan_call` reads it in an ORM transaction. `Refused` past a blocking quota."""
        subscription = attempt.subscription
        plan = self._catalog.get(subscription.plan_id) if subscription is not None else None
        if subscription is None or plan is None:
            async with postgres.place(), self._sessions() as session, session.begin():
                return await self._plan_call(session, attempt)
        return await postgres.plan_call(
            attempt.call, subscription, plan, self._catalog.metered_price(attempt.call.tool)
        )

    async def _plan_call(self, session: AsyncSession, attempt: _Attempt) -> Decision | None:
        """Count (or meter) the call under the user's subscription to one of its counting plans;
        None when the cache was behind (no longer subscribed), `Refused` past a blocking quota."""
        call = attempt.call
        subscription = attempt.subscription or await entitling_subscription(
            session, call.user_id, attempt.counted_plan_ids, grace=self._entitlements.grace
        )
        plan = self._catalog.get(subscription.plan_id) if subscription is not None else None
        if subscription is None or plan is None:
            return None
        metered = self._catalog.metered_price(call.tool)
        return await record_plan_call(session, call, subscription, plan, metered)
