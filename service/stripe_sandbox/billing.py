"""Subscription lifecycle: start, renew, retry failed payments, cancel; and the clock that drives it.

Every state change goes through `Sandbox.emit` so webhooks see what Stripe would send. The
renewal and retry schedule is driven by the sandbox clock (`advance_to`), which processes due work
strictly in time order so that advancing three months renews three times.
"""

from __future__ import annotations

import calendar
import datetime as dt
from typing import Any

from . import objects_billing as ob
from .cards import RENEWAL_DECLINE, decline_of
from .errors import StripeError, invalid_request
from .ids import new_id
from .payments import charge_card
from .sandbox import Sandbox

Obj = dict[str, Any]
DAY = 86400


def add_interval(timestamp: int, interval: str, count: int, anchor_day: int) -> int:
    """Calendar arithmetic as Stripe bills: months keep the anchor day, clamped to month end."""
    moment = dt.datetime.fromtimestamp(timestamp, dt.UTC)
    if interval == "day":
        return timestamp + count * DAY
    if interval == "week":
        return timestamp + count * 7 * DAY
    months = count * (12 if interval == "year" else 1)
    index = moment.month - 1 + months
    year, month = moment.year + index // 12, index % 12 + 1
    day = min(anchor_day, calendar.monthrange(year, month)[1])
    return int(moment.replace(year=year, month=month, day=day).timestamp())


# Subscriptions -----------------------------------------------------------------------------------


def _period(sub: Obj) -> tuple[int, int]:
    item = sub["items"]["data"][0]
    return int(item["current_period_start"]), int(item["current_period_end"])


def start_subscription(
    sb: Sandbox,
    *,
    customer: Obj,
    recurring_items: list[tuple[Obj, int]],
    one_time_items: list[tuple[Obj, int]],
    metadata: dict[str, str],
    pm: Obj,
) -> tuple[Obj, Obj]:
    """Create an active subscription whose first invoice is paid with `pm` (checked by the caller)."""
    now = sb.now()
    sub_id = new_id("sub")
    first_recurring = recurring_items[0][0]["recurring"]
    end = add_interval(now, first_recurring["interval"], first_recurring["interval_count"], _day(now))
    items = [
        ob.subscription_item(id_=new_id("si"), now=now, sub_id=sub_id, p=p, quantity=q, start=now, end=end)
        for p, q in recurring_items
    ]
    sub = ob.subscription(
        id_=sub_id,
        now=now,
        customer_id=customer["id"],
        currency=recurring_items[0][0]["currency"],
        items=items,
        metadata=metadata,
    )
    sub["default_payment_method"] = pm["id"]
    sb.store.put(sub)
    extra = [
        {"id": new_id("si"), "price": p, "quantity": q} for p, q in one_time_items
    ]  # one-time prices bill once, on the first invoice only
    invoice = _new_invoice(sb, sub, customer, "subscription_create", now, now, extra)
    if not _collect(sb, invoice, sub):
        raise StripeError(402, "Your card was declined.", type_="card_error", code="card_declined")
    sub["latest_invoice"] = invoice["id"]
    sb.emit("customer.subscription.created", sub)
    return sub, invoice


def _day(timestamp: int) -> int:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).day


def _new_invoice(
    sb: Sandbox,
    sub: Obj,
    customer: Obj,
    reason: str,
    start: int,
    end: int,
    extra_items: list[Obj] | None = None,
) -> Obj:
    invoice_id = new_id("in")
    item_start, item_end = _period(sub)
    lines = [
        ob.invoice_line(
            id_=new_id("il"),
            invoice_id=invoice_id,
            item=item,
            sub_id=sub["id"],
            start=item_start,
            end=item_end,
        )
        for item in sub["items"]["data"]
    ]
    for item in extra_items or []:
        line = ob.invoice_line(
            id_=new_id("il"), invoice_id=invoice_id, item=item, sub_id=sub["id"], start=start, end=start
        )
        line["parent"]["subscription_item_details"]["subscription_item"] = None
        lines.append(line)
    sequence = customer["next_invoice_sequence"]
    customer["next_invoice_sequence"] = sequence + 1
    invoice = ob.invoice(
        id_=invoice_id,
        now=sb.now(),
        customer=customer,
        sub=sub,
        lines=lines,
        billing_reason=reason,
        number=f"{customer['invoice_prefix']}-{sequence:04d}",
        period_start=start,
        period_end=end,
    )
    sb.store.put(invoice)
    sb.emit("invoice.created", invoice)
    sb.emit("invoice.finalized", invoice)
    return invoice


def _collect(sb: Sandbox, invoice: Obj, sub: Obj) -> bool:
    """One payment attempt on an open invoice with the subscription's payment method."""
    pm = sb.store.get("payment_method", sub["default_payment_method"] or "")
    if pm is None:
        raise invalid_request("This customer has no attached payment source or default payment method.")
    card = sb.store.priv(pm["id"])["card"]
    decline = decline_of(card)
    renewal = invoice["billing_reason"] != "subscription_create"
    if decline is None and renewal and sb.store.priv(invoice["customer"]).get("fail_renewals"):
        decline = RENEWAL_DECLINE
    description = (
        "Subscription creation"
        if invoice["billing_reason"] == "subscription_create"
        else "Subscription update"
    )
    pi, _ch = charge_card(
        sb,
        amount=invoice["amount_due"],
        currency=invoice["currency"],
        customer_id=invoice["customer"],
        pm=pm,
        description=description,
        decline=decline,
    )
    now = sb.now()
    invoice["attempted"] = True
    invoice["attempt_count"] += 1
    if decline is not None:
        retries = sb.config.renewal_retry_days
        if invoice["attempt_count"] <= len(retries):
            invoice["next_payment_attempt"] = now + retries[invoice["attempt_count"] - 1] * DAY
        else:
            invoice["next_payment_attempt"] = None
        sb.emit("invoice.payment_failed", invoice)
        return False
    payment = ob.invoice_payment(id_=new_id("inpay"), now=now, invoice=invoice, payment_intent_id=pi["id"])
    payment.update(amount_paid=invoice["amount_due"], status="paid")
    payment["status_transitions"]["paid_at"] = now
    sb.store.put(payment)
    invoice.update(
        status="paid", amount_paid=invoice["amount_due"], amount_remaining=0, next_payment_attempt=None
    )
    invoice["status_transitions"]["paid_at"] = now
    sb.emit("invoice.paid", invoice)
    sb.emit("invoice.payment_succeeded", invoice)
    return True


def renew(sb: Sandbox, sub: Obj) -> None:
    """The period ended: end a subscription scheduled to cancel, or bill the next period."""
    start, end = _period(sub)
    if sub["cancel_at_period_end"] or (sub["cancel_at"] is not None and sub["cancel_at"] <= end):
        cancel_now(
            sb, sub, ended_at=end, reason=sub["cancellation_details"]["reason"] or "cancellation_requested"
        )
        return
    before = sb.snapshot(sub)
    anchor = _day(sub["billing_cycle_anchor"])
    for item in sub["items"]["data"]:
        recurring = item["price"]["recurring"]
        item["current_period_start"] = end
        item["current_period_end"] = add_interval(
            end, recurring["interval"], recurring["interval_count"], anchor
        )
    customer = sb.get("customer", sub["customer"])
    invoice = _new_invoice(sb, sub, customer, "subscription_cycle", start, end)
    sub["latest_invoice"] = invoice["id"]
    if not _collect(sb, invoice, sub):
        sub["status"] = "past_due"
    sb.emit_updated("customer.subscription.updated", before, sub)


def retry(sb: Sandbox, invoice: Obj) -> None:
    """A scheduled retry of a failed renewal payment."""
    sub_id = invoice["parent"]["subscription_details"]["subscription"]
    sub = sb.get("subscription", sub_id)
    if sub["status"] in ("canceled", "incomplete_expired"):
        invoice["next_payment_attempt"] = None
        return
    before = sb.snapshot(sub)
    if _collect(sb, invoice, sub):
        if sub["status"] in ("past_due", "unpaid") and all(
            i["status"] != "open" for i in sb.store.objects["invoice"].values() if _sub_of(i) == sub_id
        ):
            sub["status"] = "active"
        sb.emit_updated("customer.subscription.updated", before, sub)
        return
    if invoice["next_payment_attempt"] is None:
        if sb.config.final_failure_status == "canceled":
            cancel_now(sb, sub, ended_at=sb.now(), reason="payment_failed")
            return
        sub["status"] = "unpaid"
        sb.emit_updated("customer.subscription.updated", before, sub)


def _sub_of(invoice: Obj) -> str | None:
    details = (invoice.get("parent") or {}).get("subscription_details") or {}
    value = details.get("subscription")
    return None if value is None else str(value)


def schedule_cancel(sb: Sandbox, sub: Obj, flag: bool) -> None:
    """`cancel_at_period_end`, with the fields Stripe sets alongside it in the pinned version."""
    sub["cancel_at_period_end"] = flag
    sub["cancel_at"] = _period(sub)[1] if flag else None
    sub["canceled_at"] = sb.now() if flag else None
    sub["cancellation_details"]["reason"] = "cancellation_requested" if flag else None


def cancel_now(sb: Sandbox, sub: Obj, *, ended_at: int, reason: str) -> None:
    now = sb.now()
    sub["status"] = "canceled"
    sub["ended_at"] = ended_at
    sub["canceled_at"] = sub["canceled_at"] or now
    sub["cancellation_details"]["reason"] = reason
    for invoice in sb.store.objects["invoice"].values():
        if _sub_of(invoice) == sub["id"] and invoice["status"] == "open":
            invoice["next_payment_attempt"] = None
    sb.emit("customer.subscription.deleted", sub)


# The clock ---------------------------------------------------------------------------------------


def _next_due(sb: Sandbox) -> tuple[int, str, Obj] | None:
    candidates: list[tuple[int, str, Obj]] = []
    for session in sb.store.objects["checkout.session"].values():
        if session["status"] == "open":
            candidates.append((session["expires_at"], "expire", session))
    for sub in sb.store.objects["subscription"].values():
        if sub["status"] in ("active", "past_due"):
            candidates.append((_period(sub)[1], "renew", sub))
    for invoice in sb.store.objects["invoice"].values():
        if invoice["status"] == "open" and invoice["next_payment_attempt"] is not None:
            candidates.append((invoice["next_payment_attempt"], "retry", invoice))
    if not candidates:
        return None
    return min(candidates, key=lambda c: c[0])


def advance_to(sb: Sandbox, target: int) -> None:
    """Process everything due up to `target` in time order, then set the clock to `target`."""
    from .checkout import expire_session

    hint = sb.due_hint
    if hint is not None and hint[0] == sb.epoch and (hint[1] is None or hint[1] > target):
        # Nothing changed since the last look and nothing it found is due yet: every read
        # request lands here instead of scanning every session, subscription and invoice.
        sb.clock.set_now(target)
        return
    due = None
    for _ in range(10_000):  # a bound, not a schedule: far more than any test advances through
        due = _next_due(sb)
        if due is None or due[0] > target:
            break
        when, action, obj = due
        sb.clock.set_now(when)
        if action == "expire":
            expire_session(sb, obj)
        elif action == "renew":
            renew(sb, obj)
        else:
            retry(sb, obj)
    sb.clock.set_now(target)
    sb.due_hint = (sb.epoch, due[0] if due is not None else None)
