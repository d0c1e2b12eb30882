"""The sandbox clock's work: what falls due as time moves (session expiry, renewals, trial notices,
payment retries), processed in time order the way Stripe test clocks do."""

from __future__ import annotations

from . import billing, checkout
from .objects import Obj
from .sandbox import Sandbox

TRIAL_WILL_END_NOTICE = 3 * billing.DAY


INCOMPLETE_EXPIRY = 23 * 3600


def _follows(sandbox: Sandbox, customer_id: str | None, clock_id: str | None) -> bool:
    return sandbox.clock_of(customer_id) == clock_id


def _next_due(sandbox: Sandbox, clock_id: str | None) -> tuple[int, str, Obj] | None:
    candidates: list[tuple[int, str, Obj]] = []
    for session in sandbox.store.objects["checkout.session"].values():
        if session["status"] == "open" and _follows(sandbox, session["customer"], clock_id):
            candidates.append((session["expires_at"], "expire", session))
    for subscription in sandbox.store.objects["subscription"].values():
        if not _follows(sandbox, subscription["customer"], clock_id):
            continue
        if subscription["status"] in ("active", "past_due", "trialing"):
            candidates.append((billing.current_period(subscription)[1], "renew", subscription))
        if (
            subscription["status"] == "trialing"
            and sandbox.store.priv(subscription["id"]).get("trial_will_end_sent") != subscription["trial_end"]
        ):
            notice = max(subscription["trial_start"] or 0, subscription["trial_end"] - TRIAL_WILL_END_NOTICE)
            candidates.append((notice, "trial_will_end", subscription))
        if subscription["status"] == "incomplete":
            candidates.append(
                (subscription["created"] + INCOMPLETE_EXPIRY, "expire_incomplete", subscription)
            )
    for invoice in sandbox.store.objects["invoice"].values():
        if (
            invoice["status"] == "open"
            and invoice["next_payment_attempt"] is not None
            and _follows(sandbox, invoice["customer"], clock_id)
        ):
            candidates.append((invoice["next_payment_attempt"], "retry", invoice))
    if not candidates:
        return None
    return min(candidates, key=lambda candidate: candidate[0])


def advance_to(sandbox: Sandbox, target: int, clock_id: str | None = None) -> None:
    """Process everything due up to `target` in time order, then set the clock to `target`.

    `clock_id` selects a test clock: only objects of its customers move, in its time.
    """
    with sandbox.on_clock(clock_id):
        hint = sandbox.due_hint if clock_id is None else None
        if hint is not None and hint[0] == sandbox.epoch and (hint[1] is None or hint[1] > target):
            # Nothing changed since the last look and nothing it found is due yet: every read
            # request lands here instead of scanning every session, subscription and invoice.
            sandbox.clock.set_now(target)
            return
        due = None
        for _ in range(10_000):  # a bound, not a schedule: far more than any test advances through
            due = _next_due(sandbox, clock_id)
            if due is None or due[0] > target:
                break
            when, action, obj = due
            sandbox.clock.set_now(when)
            if action == "expire":
                checkout.expire_session(sandbox, obj)
            elif action == "renew":
                billing.renew(sandbox, obj)
            elif action == "trial_will_end":
                billing.trial_will_end(sandbox, obj)
            elif action == "expire_incomplete":
                billing.expire_incomplete(sandbox, obj)
            else:
                billing.retry(sandbox, obj)
        sandbox.clock.set_now(target)
        if clock_id is None:
            sandbox.due_hint = (sandbox.epoch, due[0] if due is not None else None)


def advance(sandbox: Sandbox, seconds: int) -> int:
    """Move forward `seconds` and process what fell due; returns the new time."""
    advance_to(sandbox, sandbox.now() + seconds)
    return sandbox.now()
