"""Deciding and recording paid calls funded by an included quota, metered billing or credits.

Every function runs inside the caller's transaction, the one that decides the call may run: the
call's usage row (unique per user and call key) and the counter or balance it moves commit
together or not at all. A retried call finds its row and is let through without counting again.
A refused call raises `Refused` after writing: the caller's transaction must roll back (no
savepoint, which would cost two more round trips on every paid call).

`service/billing/usage_sqlite.py` runs the same decisions as SQL text on SQLite (ADR 7), and
`service/billing/usage_postgres.py` on PostgreSQL (ADR 10): a change to what is written here must
be made there too.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from sqlalchemy import Table, and_, bindparam, case, delete, func, or_, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession
from sqlmodel.sql.expression import Select, SelectOfScalar

from service.billing.models import Subscription
from service.billing.plans import CreditPack, MeteredPrice, Plan
from service.billing.subscriptions import grants_access
from service.billing.usage_models import CreditBalance, CreditEntry, CreditPayment, UsageCounter, UsageRecord
from service.db.metadata import utcnow
from service.db.upsert import dialect_name, upsert_into

# How an allowed paid call is paid for: its plan's included calls, the metered price, or a credit.
Funding = Literal["included", "metered", "credit"]
FUNDED_BY_PLAN: Final[Funding] = "included"
FUNDED_BY_METER: Final[Funding] = "metered"
FUNDED_BY_CREDIT: Final[Funding] = "credit"
# What `credit_payment` records for a payment whose dispute was won: what it took is given back.
REINSTATED: Final = "reinstated"
# Why the credit ledger moved: a pack bought (+), a call paid (-) or given back when it did not
# complete (+), a purchase taken back (-), what a dispute took given back when it was won (+).
CreditReason = Literal["purchase", "spend", "reversal", "reinstatement"]


@dataclass(frozen=True)
class PaidCall:
    """A paid call about to run: `call_key` identifies it across retries and replicas."""

    user_id: str
    tool: str
    call_key: str


@dataclass(frozen=True)
class Decision:
    allowed: bool
    funding: Funding | None = None  # how an allowed call is paid; None for a retry decided before
    usage_id: str | None = None


# A call recorded before (a retry): it passes, and nothing was recorded for this attempt.
RETRIED = Decision(allowed=True)
REFUSED = Decision(allowed=False)


class Refused(Exception):
    """Nothing pays for the call; what the decision wrote must be rolled back with the transaction."""


def new_usage_id() -> str:
    """Unique (96 random bits) and led by the time in microseconds, so rows recorded one after
    another take neighbouring places in the key's index instead of a random page of it."""
    return f"ur_{time.time_ns() // 1000:013x}{secrets.token_urlsafe(12)}"


def _table(model: Any) -> Table:
    table: Table = model.__table__
    return table


# The decisions' UPDATEs name tables, not ORM classes: an UPDATE of a mapped class runs the ORM's
# bulk-update machinery (synchronising the session's objects), which these rows never are.
_BALANCE = _table(CreditBalance)
_COUNTER = _table(UsageCounter)
_USAGE = _table(UsageRecord)


# The usage row's columns a decision writes: all but what the reporter fills in later.
_CLAIM_COLUMNS = [column for column in _USAGE.c if column.name not in ("reported_at", "last_error")]
# Those only some rows have (a plan call's, a metered call's): NULL unless given.
_CLAIM_DEFAULTS = dict.fromkeys(column.name for column in _CLAIM_COLUMNS if column.nullable)


def _claim_statement(insert: Any) -> Any:
    """The usage row's INSERT unless the call's key is recorded, built once: every value a bound
    parameter, so a decision neither builds nor compiles a statement."""
    return (
        insert(_USAGE)
        .values({column.name: bindparam(column.name) for column in _CLAIM_COLUMNS})
        .on_conflict_do_nothing(index_elements=["user_id", "call_key"])
        .returning(_USAGE.c.id)
    )


_CLAIM = {"postgresql": _claim_statement(postgresql_insert), "sqlite": _claim_statement(sqlite_insert)}


async def _claim(session: AsyncSession, call: PaidCall, funding: Funding, **values: Any) -> str | None:
    """Insert the call's usage row; its id, or None when this call was recorded before (a retry)."""
    usage_id = new_usage_id()
    params = {
        **_CLAIM_DEFAULTS,
        "id": usage_id,
        "user_id": call.user_id,
        "call_key": call.call_key,
        "tool": call.tool,
        "funding": funding,
        "created_at": utcnow(),
        "report_attempts": 0,
        **values,
    }
    claimed = (await session.exec(_CLAIM[dialect_name(session)], params=params)).first()
    return str(claimed[0]) if claimed is not None else None


# -- credits ---------------------------------------------------------------------------------


async def spend_credit(session: AsyncSession, call: PaidCall) -> Decision:
    """Pay for `call` with one of the user's credits, atomically; `Refused` when there is none.

    Of any number of concurrent calls, exactly as many as there are credits pass: the decrement is
    a conditional update that the database serialises per user. A retry of a call paid before
    (its usage row exists) passes without spending, whatever the balance is now.
    """
    usage_id = await _claim(session, call, FUNDED_BY_CREDIT)
    if usage_id is None:
        return RETRIED
    spent = await session.exec(
        update(_BALANCE)
        .where(_BALANCE.c.user_id == call.user_id, _BALANCE.c.balance >= 1)
        .values(balance=_BALANCE.c.balance - 1, updated_at=utcnow())
    )
    if spent.rowcount != 1:
        raise Refused
    await session.exec(
        upsert_into(session, CreditEntry).values(
            user_id=call.user_id, delta=-1, reason="spend", source=f"usage:{usage_id}", created_at=utcnow()
        )
    )
    return Decision(allowed=True, funding=FUNDED_BY_CREDIT, usage_id=usage_id)


async def grant_credits(
    session: AsyncSession,
    user_id: str,
    pack: CreditPack,
    *,
    source: str,
    payment_intent_id: str | None,
) -> bool:
    """Add the pack's credits once per `source` (the Checkout Session); False if granted before."""
    entry = await _append(
        session,
        user_id,
        pack.credits,
        "purchase",
        source,
        pack_id=pack.id,
        payment_intent_id=payment_intent_id,
    )
    if entry is None:
        return False
    upsert = (
        upsert_into(session, CreditBalance)
        .values(user_id=user_id, balance=pack.credits, updated_at=utcnow())
        .on_conflict_do_update(
            index_elements=["user_id"],
            set_={"balance": _table(CreditBalance).c.balance + pack.credits, "updated_at": utcnow()},
        )
    )
    await session.exec(upsert)
    return True


async def meet_credit_payment(
    session: AsyncSession, payment_intent_id: str, reversal: str | None = None
) -> str | None:
    """Write the payment's `credit_payment` row, recording `reversal` (a refund or dispute) unless
    one is recorded already; the row's reversal afterwards. Its grant (no reversal) and its reversal
    both write this row before anything else, so whichever comes second waits for the first to
    commit and then sees what it wrote: a reversal sees the purchase, a grant the reversal.

    A full refund is final and replaces what is recorded; a won dispute ('reinstated') replaces
    anything but a refund, so a dispute's reversal applied after the win takes nothing."""
    table = _table(CreditPayment)
    insert = upsert_into(session, CreditPayment).values(
        payment_intent_id=payment_intent_id, reversal=reversal, created_at=utcnow()
    )
    recorded, new = table.c.reversal, insert.excluded.reversal
    statement = insert.on_conflict_do_update(
        index_elements=["payment_intent_id"],
        set_={
            "reversal": case(
                (new == "refunded", new),
                (and_(new == REINSTATED, or_(recorded.is_(None), recorded != "refunded")), new),
                else_=func.coalesce(recorded, new),
            )
        },
    ).returning(table.c.reversal)
    row = (await session.exec(statement)).one()
    return str(row[0]) if row[0] is not None else None


def purchase_paid_by(payment_intent_id: str) -> SelectOfScalar[CreditEntry]:
    """The ledger's purchase entry for a payment (an index's query)."""
    return select(CreditEntry).where(
        col(CreditEntry.payment_intent_id) == payment_intent_id, col(CreditEntry.reason) == "purchase"
    )


async def take_back_purchase(session: AsyncSession, payment_intent_id: str) -> tuple[str, int] | None:
    """After a refund or dispute of a credit purchase: remove its credits not spent yet, once.

    Returns (user, credits taken back), or None when the payment bought no credits or was taken
    back before. Spends use up the oldest purchase first, so only what this purchase has left is
    taken, never a later purchase's credits; the balance never goes below zero.
    """
    purchase = (await session.exec(purchase_paid_by(payment_intent_id))).first()
    if purchase is None or purchase.id is None:
        return None
    # A refund after a won dispute's reinstatement takes back again, under a source of its own.
    source = f"reversal:{payment_intent_id}"
    if (await session.exec(_entry_of(f"reinstatement:{payment_intent_id}"))).first() is not None:
        source = f"reversal:{payment_intent_id}:after-reinstatement"
    # The balance row's lock first: spends and take-backs of this user wait, and the ledger read
    # below (a new statement, so a new snapshot on PostgreSQL) sees every one that committed.
    balance = await session.get(CreditBalance, purchase.user_id, with_for_update=True)
    unspent = min(
        await _unspent_of(session, purchase.user_id, purchase.id, purchase.delta),
        balance.balance if balance is not None else 0,
    )
    entry = await _append(
        session,
        purchase.user_id,
        -unspent,
        "reversal",
        source,
        pack_id=purchase.pack_id,
        payment_intent_id=payment_intent_id,
    )
    if entry is None:
        return None
    if balance is not None and unspent:
        balance.balance -= unspent
        balance.updated_at = utcnow()
        session.add(balance)
        await session.flush()
    return purchase.user_id, unspent


async def reinstate_purchase(session: AsyncSession, payment_intent_id: str) -> tuple[str, int] | None:
    """After a dispute of a credit purchase was won: give back what its reversal took, once.

    The payment is recorded as reinstated first, so a grant still to come keeps its credits and a
    reversal of the dispute applied later takes nothing. Returns (user, credits given back), or
    None when a refund took the payment back, nothing was taken, or it was given back before.
    """
    if await meet_credit_payment(session, payment_intent_id, REINSTATED) != REINSTATED:
        return None
    taken = (await session.exec(_entry_of(f"reversal:{payment_intent_id}"))).first()
    if taken is None:
        return None
    # The balance row's lock first, as a take-back does: spends of this user wait.
    balance = await session.get(CreditBalance, taken.user_id, with_for_update=True)
    entry = await _append(
        session,
        taken.user_id,
        -taken.delta,
        "reinstatement",
        f"reinstatement:{payment_intent_id}",
        pack_id=taken.pack_id,
        payment_intent_id=payment_intent_id,
    )
    if entry is None:
        return None
    if balance is not None and taken.delta:
        balance.balance -= taken.delta
        balance.updated_at = utcnow()
        session.add(balance)
        await session.flush()
    return taken.user_id, -taken.delta


def _entry_of(source: str) -> SelectOfScalar[CreditEntry]:
    """The ledger entry written under `source` (unique), if any."""
    return select(CreditEntry).where(col(CreditEntry.source) == source)


async def _unspent_of(session: AsyncSession, user_id: str, purchase_id: int, credits: int) -> int:
    """What is left of the purchase `purchase_id` (`credits`) when spends use up the oldest purchase
    first: the spends that the earlier purchases, less what their reversals took back, did not
    cover come out of this one (and those beyond it out of later ones)."""
    entry = CreditEntry
    earlier_payments = select(entry.payment_intent_id).where(
        col(entry.user_id) == user_id,
        col(entry.reason) == "purchase",
        col(entry.id) < purchase_id,
        col(entry.payment_intent_id).is_not(None),
    )
    earlier = or_(
        and_(col(entry.reason) == "purchase", col(entry.id) < purchase_id),
        and_(
            col(entry.reason).in_(("reversal", "reinstatement")),
            col(entry.payment_intent_id).in_(earlier_payments),
        ),
    )
    totals = await session.exec(
        select(
            func.coalesce(func.sum(case((col(entry.reason) == "spend", -col(entry.delta)), else_=0)), 0),
            func.coalesce(func.sum(case((earlier, col(entry.delta)), else_=0)), 0),
        ).where(col(entry.user_id) == user_id)
    )
    spent, covered_before = totals.one()
    not_covered = max(0, int(spent) - int(covered_before))
    return max(0, credits - not_covered)


async def _append(
    session: AsyncSession,
    user_id: str,
    delta: int,
    reason: CreditReason,
    source: str,
    *,
    pack_id: str | None = None,
    payment_intent_id: str | None = None,
) -> int | None:
    """A ledger entry, unless one with this `source` exists; the new entry's id or None."""
    statement = (
        upsert_into(session, CreditEntry)
        .values(
            user_id=user_id,
            delta=delta,
            reason=reason,
            source=source,
            pack_id=pack_id,
            payment_intent_id=payment_intent_id,
            created_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["source"])
        .returning(_table(CreditEntry).c.id)
    )
    row = (await session.exec(statement)).first()
    return int(row[0]) if row is not None else None


async def credit_balance(session: AsyncSession, user_id: str) -> int:
    row = await session.get(CreditBalance, user_id)
    return row.balance if row is not None else 0


async def ledger_sum(session: AsyncSession, user_id: str) -> int:
    """The balance as the ledger adds it up (the balance row must always equal it)."""
    total = await session.exec(
        select(func.coalesce(func.sum(CreditEntry.delta), 0)).where(col(CreditEntry.user_id) == user_id)
    )
    return int(total.one())


# -- plans with included calls ---------------------------------------------------------------


def period_of(subscription: Subscription) -> str:
    """The billing period a call falls in, named by the period's end (as Stripe reports it)."""
    end = subscription.current_period_end
    return end.isoformat() if end is not None else "open"


async def entitling_subscription(
    session: AsyncSession, user_id: str, plan_ids: Iterable[str], *, grace: timedelta
) -> Subscription | None:
    """The user's subscription that grants one of `plan_ids` now (the latest, if several do)."""
    wanted = set(plan_ids)
    rows = await session.exec(
        select(Subscription)
        .where(col(Subscription.user_id) == user_id, col(Subscription.plan_id).in_(wanted))
        .order_by(col(Subscription.created_at).desc())
    )
    now = utcnow()
    return next((row for row in rows.all() if grants_access(row, grace=grace, now=now)), None)


def plan_call_columns(
    subscription: Subscription, period: str, plan: Plan, metered: MeteredPrice | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A plan call's usage-record columns: those every such record has, and those a metered one adds
    (empty when the plan meters no overage or the tool has no metered price)."""
    values: dict[str, Any] = {
        "plan_id": plan.id,
        "subscription_id": subscription.id,
        "period": period,
    }
    billing: dict[str, Any] = {}
    if metered is not None and plan.meters_overage:
        billing = {
            "customer_id": subscription.customer_id,
            "event_name": metered.event_name,
            "unit_amount": metered.unit_amount,
            "currency": metered.currency,
            "next_report_at": utcnow(),
        }
    return values, billing


async def record_plan_call(
    session: AsyncSession,
    call: PaidCall,
    subscription: Subscription,
    plan: Plan,
    metered: MeteredPrice | None,
) -> Decision:
    """Count `call` against the plan's included calls this period; past them, meter it (overage
    `meter`) or raise `Refused` (`block`)."""
    assert plan.included_calls is not None, "only plans that count calls come here"
    period = period_of(subscription)
    values, billing = plan_call_columns(subscription, period, plan, metered)
    if plan.included_calls == 0:  # pay as you go: every call metered, nothing to count
        if not billing:
            raise Refused
        usage_id = await _claim(session, call, FUNDED_BY_METER, **values, **billing)
        if usage_id is None:
            return RETRIED
        return Decision(allowed=True, funding=FUNDED_BY_METER, usage_id=usage_id)
    usage_id = await _claim(session, call, FUNDED_BY_PLAN, **values)
    if usage_id is None:
        return RETRIED
    if await _count(session, subscription, period, plan.included_calls):
        return Decision(allowed=True, funding=FUNDED_BY_PLAN, usage_id=usage_id)
    if not billing:
        raise Refused
    await session.exec(
        update(_USAGE).where(_USAGE.c.id == usage_id).values(funding=FUNDED_BY_METER, **billing)
    )
    return Decision(allowed=True, funding=FUNDED_BY_METER, usage_id=usage_id)


async def _count(session: AsyncSession, subscription: Subscription, period: str, included: int) -> bool:
    """One more included call in this period, if any is left (a conditional update, or the first row)."""
    raise_used = (
        update(_COUNTER)
        .where(
            _COUNTER.c.subscription_id == subscription.id,
            _COUNTER.c.period == period,
            _COUNTER.c.used < included,
        )
        .values(used=_COUNTER.c.used + 1)
    )
    if (await session.exec(raise_used)).rowcount == 1:
        return True
    first = (
        upsert_into(session, UsageCounter)
        .values(subscription_id=subscription.id, period=period, user_id=subscription.user_id, used=1)
        .on_conflict_do_nothing(index_elements=["subscription_id", "period"])
        .returning(_table(UsageCounter).c.used)
    )
    if (await session.exec(first)).first() is not None:
        return True
    # Another transaction made the row meanwhile and has committed (we waited for it): try again.
    return bool((await session.exec(raise_used)).rowcount == 1)


async def release_call(session: AsyncSession, user_id: str, usage_id: str) -> Funding | None:
    """Take back what paid for a call that failed or was cancelled before it answered: its usage row
    goes, with the credit (a ledger entry gives it back) or the included call it used. A metered
    call the reporter has taken for sending stays billed. How it had been paid, or None when
    nothing was taken back."""
    released = (
        await session.exec(
            delete(_USAGE)
            .where(
                _USAGE.c.id == usage_id,
                _USAGE.c.user_id == user_id,
                # A metered call the reporter has taken for sending (or tried to) stays billed.
                or_(
                    _USAGE.c.funding != FUNDED_BY_METER,
                    and_(_USAGE.c.reported_at.is_(None), _USAGE.c.next_report_at <= utcnow()),
                ),
            )
            .returning(_USAGE.c.funding, _USAGE.c.subscription_id, _USAGE.c.period, _USAGE.c.created_at)
        )
    ).first()
    if released is None:
        return None
    funding, subscription_id, period, spent_at = released
    if funding == FUNDED_BY_CREDIT:
        # A take-back holds the balance row until it commits; waiting for it first lets the check
        # below (a statement of its own, so a fresh snapshot on PostgreSQL) see its reversal.
        await session.exec(
            select(CreditBalance.user_id).where(col(CreditBalance.user_id) == user_id).with_for_update()
        )
    if funding == FUNDED_BY_CREDIT and await _reversed_since(session, user_id, spent_at):
        # A refund or dispute took the purchase back while the call ran, counting this credit as
        # spent: giving it back now would hand out a credit of a purchase taken back.
        return funding  # type: ignore[no-any-return]
    if funding == FUNDED_BY_CREDIT:
        await session.exec(
            update(_BALANCE)
            .where(_BALANCE.c.user_id == user_id)
            .values(balance=_BALANCE.c.balance + 1, updated_at=utcnow())
        )
        await _append(session, user_id, 1, "spend", f"returned:{usage_id}")
    elif funding == FUNDED_BY_PLAN:
        await session.exec(
            update(_COUNTER)
            .where(
                _COUNTER.c.subscription_id == subscription_id,
                _COUNTER.c.period == period,
                _COUNTER.c.used > 0,
            )
            .values(used=_COUNTER.c.used - 1)
        )
    return funding  # type: ignore[no-any-return]


async def _reversed_since(session: AsyncSession, user_id: str, since: datetime) -> bool:
    """Whether a purchase of the user's was taken back at or after `since`."""
    entry = CreditEntry
    found = await session.exec(
        select(entry.id)
        .where(col(entry.user_id) == user_id, col(entry.reason) == "reversal", col(entry.created_at) >= since)
        .limit(1)
    )
    return found.first() is not None


async def included_used(session: AsyncSession, subscription: Subscription) -> int:
    row = await session.get(UsageCounter, (subscription.id, period_of(subscription)))
    return row.used if row is not None else 0


@dataclass(frozen=True)
class PeriodUsage:
    """One subscription's calls in its current period: included ones used, and metered ones."""

    included_used: int
    metered_calls: int
    metered_amount: int  # minor units of the metered prices' currency, as recorded per call


def metered_in_period(subscription_id: str, period: str) -> Select[int, int | None]:
    """The count and the sum of a subscription's metered calls in one period (an index's query)."""
    return select(func.count(), func.coalesce(func.sum(UsageRecord.unit_amount), 0)).where(
        col(UsageRecord.subscription_id) == subscription_id,
        col(UsageRecord.period) == period,
        col(UsageRecord.funding) == FUNDED_BY_METER,
    )


async def period_usage(session: AsyncSession, subscription: Subscription) -> PeriodUsage:
    metered = await session.exec(metered_in_period(subscription.id, period_of(subscription)))
    calls, amount = metered.one()
    return PeriodUsage(await included_used(session, subscription), int(calls or 0), int(amount or 0))
