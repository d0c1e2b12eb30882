"""Subscription lifecycle: start, renew, retry failed payments, cancel; and the clock that drives it.

Every state change goes through `Sandbox.emit` so webhooks see what Stripe would send. The
renewal and retry schedule is driven by the sandbox clock (`advance_to`), which processes due work
strictly in time order so that advancing three months renews three times.
"""

from __future__ import annotations

import calendar
import datetime as dt
from typing import Any

from . import meters, plan_changes
from . import objects_billing as ob
from .cards import RENEWAL_DECLINE, Decline, decline_of
from .errors import StripeError, invalid_request
from .ids import new_id
from .objects import is_metered
from .payments import confirm, needs_authentication, new_payment_intent, page_url, request_authentication
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
    recurring_items: list[tuple[Obj, int | None]],
    one_time_items: list[tuple[Obj, int]],
    metadata: dict[str, str],
    pm: Obj | None,
    trial_end: int | None = None,
    payment_behavior: str = "error_if_incomplete",
    description: str | None = None,
    missing_payment_method: str = "create_invoice",
) -> tuple[Obj, Obj]:
    """Create a subscription and its first invoice; collect it unless in a trial or told not to.

    `payment_behavior` is Stripe's: `error_if_incomplete` answers a decline with a card error,
    `allow_incomplete` leaves the subscription `incomplete` with an open invoice, and
    `default_incomplete` does not try to collect at all (the vendor pays the invoice later).
    """
    now = sb.now()
    sub_id = new_id("sub")
    first_recurring = recurring_items[0][0]["recurring"]
    if trial_end is not None:
        end = trial_end
    else:
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
    sub.update(
        default_payment_method=None if pm is None else pm["id"],
        description=description,
        test_clock=customer.get("test_clock"),
    )
    sub["trial_settings"]["end_behavior"]["missing_payment_method"] = missing_payment_method
    if trial_end is not None:
        sub.update(status="trialing", trial_start=now, trial_end=trial_end, billing_cycle_anchor=trial_end)
    else:
        sub["status"] = "incomplete"
    sb.store.put(sub)
    extra = [
        {"id": new_id("si"), "price": p, "quantity": q} for p, q in one_time_items
    ]  # one-time prices bill once, on the first invoice only
    invoice = _new_invoice(
        sb, sub, customer, "subscription_create", now, now, extra, trial=trial_end is not None
    )
    sub["latest_invoice"] = invoice["id"]
    # The creation event carries the subscription as created (incomplete or trialing); becoming
    # active is the `customer.subscription.updated` that follows, as on Stripe. With
    # `error_if_incomplete` a failed first payment means no subscription, so the event waits.
    all_or_nothing = payment_behavior == "error_if_incomplete" and trial_end is None
    before = sb.snapshot(sub)
    if not all_or_nothing:
        sb.emit("customer.subscription.created", sub)
    if trial_end is not None or invoice["amount_due"] == 0:
        _mark_paid(sb, invoice)
        if sub["status"] == "incomplete":
            sub["status"] = "active"
    elif payment_behavior != "default_incomplete":
        if _collect(sb, invoice, sub):
            sub["status"] = "active"
        elif all_or_nothing:
            decline = sb.store.priv(invoice["id"]).get("last_decline") or RENEWAL_DECLINE_ARGS
            sb.store.remove("subscription", sub["id"])
            invoice.update(status="void", amount_remaining=0, next_payment_attempt=None)
            invoice["status_transitions"]["voided_at"] = now
            raise StripeError(402, decline[2], type_="card_error", code=decline[0], decline_code=decline[1])
    if all_or_nothing:
        sb.emit("customer.subscription.created", before)
    sb.emit_updated("customer.subscription.updated", before, sub)
    return sub, invoice


RENEWAL_DECLINE_ARGS = ("card_declined", "generic_decline", "Your card was declined.")


def _mark_paid(sb: Sandbox, invoice: Obj) -> None:
    """A zero-amount invoice (a trial's first one) is paid without a payment."""
    now = sb.now()
    before = sb.snapshot(invoice)
    invoice.update(
        status="paid", amount_paid=0, amount_remaining=0, attempted=True, next_payment_attempt=None
    )
    invoice["status_transitions"]["paid_at"] = now
    sb.emit_updated("invoice.updated", before, invoice)
    sb.emit("invoice.paid", invoice)
    sb.emit("invoice.payment_succeeded", invoice)


def payment_method_for(sb: Sandbox, sub: Obj) -> Obj | None:
    """What a subscription's invoices are charged to: its own default, else its customer's."""
    pm_id = sub["default_payment_method"]
    if pm_id is None:
        customer = sb.store.get("customer", sub["customer"]) or {}
        pm_id = (customer.get("invoice_settings") or {}).get("default_payment_method")
    return None if pm_id is None else sb.store.get("payment_method", pm_id)


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
    *,
    trial: bool = False,
    only_lines: list[Obj] | None = None,
    preview: bool = False,
    bill_usage: bool | None = None,
) -> Obj:
    """The next invoice of `sub`: its items for the current period plus the prorations it owes;
    `only_lines` bills just those lines (an immediate proration invoice). A `preview` is built,
    not stored, numbered or announced.

    Licensed items bill the period ahead; metered items bill in arrears what their meter counted
    over `[start, end)`, the period that just ended, when `bill_usage` (by default on renewals that
    do not end a trial) and nothing otherwise."""
    invoice_id = new_id("upcoming_in") if preview else new_id("in")
    item_start, item_end = _period(sub)
    if bill_usage is None:
        bill_usage = reason == "subscription_cycle" and not trial
    lines = [
        _item_line(sb, sub, item, invoice_id, (start, end) if bill_usage else None, (item_start, item_end))
        for item in sub["items"]["data"]
    ]
    if only_lines is not None:
        lines = only_lines
    elif not trial and reason == "subscription_cycle":
        pending = plan_changes.pending_lines(sb, sub["id"])
        lines = [*pending, *lines]
        if not preview:
            pending.clear()
    for line in lines:
        line["invoice"] = invoice_id
    if trial:
        for line in lines:
            line.update(amount=0, subtotal=0, description=f"Trial period for {line['description']}")
    for item in extra_items or []:
        line = ob.invoice_line(
            id_=new_id("il"), invoice_id=invoice_id, item=item, sub_id=sub["id"], start=start, end=start
        )
        line["parent"]["subscription_item_details"]["subscription_item"] = None
        lines.append(line)
    sequence = customer["next_invoice_sequence"]
    if not preview:
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
    invoice["test_clock"] = customer.get("test_clock")
    invoice["footer"] = customer["invoice_settings"].get("footer")
    if invoice["amount_due"] < 0:  # a net credit: nothing to pay (the sandbox keeps no balance)
        invoice.update(amount_due=0, amount_remaining=0)
    if preview:
        invoice.update(id=None, number=None, status="draft")
        invoice["status_transitions"]["finalized_at"] = None
        return invoice
    sb.store.put(invoice)
    invoice["hosted_invoice_url"] = page_url(sb, "i", invoice_id)
    sb.emit("invoice.created", invoice)
    sb.emit("invoice.finalized", invoice)
    return invoice


def _item_line(
    sb: Sandbox,
    sub: Obj,
    item: Obj,
    invoice_id: str,
    usage_period: tuple[int, int] | None,
    period: tuple[int, int],
) -> Obj:
    if is_metered(item["price"]) and usage_period is not None:
        meter = sb.store.get("billing.meter", item["price"]["recurring"]["meter"])
        # An item added during the period counts usage from when it was added.
        counted = (max(usage_period[0], int(item["created"])), usage_period[1])
        used = 0 if meter is None else meters.usage(sb, meter, sub["customer"], *counted)
        return ob.invoice_line(
            id_=new_id("il"),
            invoice_id=invoice_id,
            item=item,
            sub_id=sub["id"],
            start=counted[0],
            end=counted[1],
            usage=used,
        )
    return ob.invoice_line(
        id_=new_id("il"), invoice_id=invoice_id, item=item, sub_id=sub["id"], start=period[0], end=period[1]
    )


def _usage_lines(sb: Sandbox, sub: Obj, start: int, end: int) -> list[Obj]:
    """The metered items' lines for `[start, end)` alone: a subscription's final usage invoice."""
    return [
        _item_line(sb, sub, item, "", (start, end), (start, end))
        for item in sub["items"]["data"]
        if is_metered(item["price"])
    ]


AUTHENTICATION_REQUIRED = Decline(
    "authentication_required",
    "authentication_required",
    "Your card was declined. This transaction requires authentication.",
)


def _collect(sb: Sandbox, invoice: Obj, sub: Obj, pm: Obj | None = None) -> bool:
    """One payment attempt on an open invoice with `pm`, else the subscription's payment method."""
    pm = pm or payment_method_for(sb, sub)
    renewal = invoice["billing_reason"] != "subscription_create"
    decline: Decline | None
    pi: Obj | None = None
    invoice["attempted"] = True
    invoice["attempt_count"] += 1
    if pm is None:
        decline = Decline("invoice_no_customer_source", None, "This customer has no attached payment source.")
    else:
        decline = decline_of(sb.store.priv(pm["id"])["card"])
        if decline is None and renewal and sb.store.priv(invoice["customer"]).get("fail_renewals"):
            decline = RENEWAL_DECLINE
        pi = new_payment_intent(
            sb,
            amount=invoice["amount_due"],
            currency=invoice["currency"],
            customer_id=invoice["customer"],
            pm=pm,
            description="Subscription update" if renewal else "Subscription creation",
        )
        sb.store.priv(pi["id"])["invoice"] = invoice["id"]
        if decline is None and needs_authentication(sb, pm):
            if not renewal:  # on-session: the customer is sent through 3-D Secure
                request_authentication(sb, pi, pm, None)
                sb.store.priv(invoice["id"])["last_decline"] = [
                    AUTHENTICATION_REQUIRED.code,
                    AUTHENTICATION_REQUIRED.decline_code,
                    AUTHENTICATION_REQUIRED.message,
                ]
                invoice["next_payment_attempt"] = None
                sb.emit("invoice.payment_action_required", invoice)
                return False
            decline = AUTHENTICATION_REQUIRED
        confirm(sb, pi, pm, decline)
    if decline is not None:
        sb.store.priv(invoice["id"])["last_decline"] = [decline.code, decline.decline_code, decline.message]
        retries = sb.config.renewal_retry_days
        if renewal and invoice["attempt_count"] <= len(retries):
            invoice["next_payment_attempt"] = sb.now() + retries[invoice["attempt_count"] - 1] * DAY
        else:
            invoice["next_payment_attempt"] = None
        sb.emit("invoice.payment_failed", invoice)
        return False
    assert pi is not None
    record_payment(sb, invoice, pi)
    return True


def record_payment(sb: Sandbox, invoice: Obj, pi: Obj) -> None:
    """`pi` succeeded for `invoice`: the invoice is paid."""
    now = sb.now()
    payment = ob.invoice_payment(id_=new_id("inpay"), now=now, invoice=invoice, payment_intent_id=pi["id"])
    payment.update(amount_paid=invoice["amount_due"], status="paid")
    payment["status_transitions"]["paid_at"] = now
    sb.store.put(payment)
    before = sb.snapshot(invoice)
    invoice.update(
        status="paid", amount_paid=invoice["amount_due"], amount_remaining=0, next_payment_attempt=None
    )
    invoice["status_transitions"]["paid_at"] = now
    sb.emit_updated("invoice.updated", before, invoice)
    sb.emit("invoice.paid", invoice)
    sb.emit("invoice.payment_succeeded", invoice)


def authenticated(sb: Sandbox, pi: Obj, ok: bool) -> None:
    """The cardholder passed (or failed) the 3-D Secure challenge for `pi`."""
    pm = sb.get("payment_method", pi["payment_method"])
    if not ok:
        pi.update(
            status="requires_payment_method",
            next_action=None,
            payment_method=None,
            last_payment_error={
                "type": "invalid_request_error",
                "code": "payment_intent_authentication_failure",
                "message": "The provided PaymentMethod has failed authentication. You can provide "
                "payment_method_data or a new PaymentMethod to attempt to fulfill this PaymentIntent again.",
                "payment_method": sb.snapshot(pm),
            },
        )
        sb.emit("payment_intent.payment_failed", pi)
        return
    sb.store.priv(pm["id"])["authenticated"] = True
    confirm(sb, pi, pm, decline_of(sb.store.priv(pm["id"])["card"]))
    invoice_id = sb.store.priv(pi["id"]).get("invoice")
    invoice = None if invoice_id is None else sb.store.get("invoice", invoice_id)
    if pi["status"] != "succeeded" or invoice is None or invoice["status"] != "open":
        return
    record_payment(sb, invoice, pi)
    sub_id = _sub_of(invoice)
    sub = None if sub_id is None else sb.store.get("subscription", sub_id)
    if sub is not None and sub["status"] in ("incomplete", "past_due") and not _open_invoices(sb, sub["id"]):
        before = sb.snapshot(sub)
        sub["status"] = "active"
        sb.emit_updated("customer.subscription.updated", before, sub)


def pay_invoice(sb: Sandbox, invoice: Obj, pm: Obj | None) -> Obj:
    """`invoices.pay`: collect an open invoice now; a subscription it completes becomes active."""
    if invoice["status"] == "paid":
        raise invalid_request("Invoice is already paid.", code="invoice_already_paid")
    if invoice["status"] != "open":
        raise invalid_request(f"You can only pay an open invoice (this one is {invoice['status']}).")
    sub_id = _sub_of(invoice)
    sub = sb.get("subscription", sub_id) if sub_id else None
    if sub is None:
        raise invalid_request("The sandbox only pays subscription invoices.")
    before = sb.snapshot(sub)
    if not _collect(sb, invoice, sub, pm):
        decline = sb.store.priv(invoice["id"])["last_decline"]
        raise StripeError(402, decline[2], type_="card_error", code=decline[0], decline_code=decline[1])
    if sub["status"] in ("incomplete", "past_due", "unpaid") and not _open_invoices(sb, sub["id"]):
        sub["status"] = "active"
    if pm is not None and sub["default_payment_method"] is None:
        sub["default_payment_method"] = pm["id"]
    sb.emit_updated("customer.subscription.updated", before, sub)
    return invoice


def _open_invoices(sb: Sandbox, sub_id: str) -> list[Obj]:
    return [i for i in sb.store.objects["invoice"].values() if _sub_of(i) == sub_id and i["status"] == "open"]


def renew(sb: Sandbox, sub: Obj) -> None:
    """The period ended: end a subscription scheduled to cancel, or bill the next period."""
    start, end = _period(sub)
    if sub["cancel_at_period_end"] or (sub["cancel_at"] is not None and sub["cancel_at"] <= end):
        if sub["status"] != "trialing":
            _final_usage_invoice(sb, sub, start, end)
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
    trial_over = sub["status"] == "trialing"
    if trial_over and payment_method_for(sb, sub) is None:
        behavior = sub["trial_settings"]["end_behavior"]["missing_payment_method"]
        if behavior == "cancel":
            cancel_now(sb, sub, ended_at=end, reason="cancellation_requested")
            return
        if behavior == "pause":
            sub["status"] = "paused"
            sub["pause_collection"] = None
            sb.emit("customer.subscription.paused", sub)
            sb.emit_updated("customer.subscription.updated", before, sub)
            return
    invoice = _new_invoice(sb, sub, customer, "subscription_cycle", start, end, bill_usage=not trial_over)
    sub["latest_invoice"] = invoice["id"]
    if invoice["amount_due"] == 0:  # nothing used and nothing owed: paid without a charge
        _mark_paid(sb, invoice)
        sub["status"] = "active"
    elif _collect(sb, invoice, sub):
        sub["status"] = "active"
    else:
        sub["status"] = "past_due"
    sb.emit_updated("customer.subscription.updated", before, sub)


def _final_usage_invoice(sb: Sandbox, sub: Obj, start: int, end: int) -> None:
    """A subscription ending at period end still owes what its meters counted in that period."""
    lines = _usage_lines(sb, sub, start, end)
    if not any(line["amount"] for line in lines):
        return
    customer = sb.get("customer", sub["customer"])
    invoice = _new_invoice(sb, sub, customer, "subscription_cycle", start, end, only_lines=lines)
    sub["latest_invoice"] = invoice["id"]
    _collect(sb, invoice, sub)


def trial_will_end(sb: Sandbox, sub: Obj) -> None:
    """Three days before a trial ends (or at once for a shorter trial), as Stripe sends it."""
    sb.store.priv(sub["id"])["trial_will_end_sent"] = sub["trial_end"]
    sb.emit("customer.subscription.trial_will_end", sub)


def expire_incomplete(sb: Sandbox, sub: Obj) -> None:
    """An `incomplete` subscription whose first invoice was not paid within 23 hours."""
    before = sb.snapshot(sub)
    sub.update(status="incomplete_expired", ended_at=sb.now())
    for invoice in _open_invoices(sb, sub["id"]):
        invoice_before = sb.snapshot(invoice)
        invoice.update(status="void", amount_remaining=0, next_payment_attempt=None)
        invoice["status_transitions"]["voided_at"] = sb.now()
        sb.emit("invoice.voided", invoice)
        sb.emit_updated("invoice.updated", invoice_before, invoice)
    sb.emit_updated("customer.subscription.updated", before, sub)
    sb.emit("customer.subscription.deleted", sub)


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


TRIAL_WILL_END_NOTICE = 3 * DAY
INCOMPLETE_EXPIRY = 23 * 3600


def _follows(sb: Sandbox, customer_id: str | None, clock_id: str | None) -> bool:
    return sb.clock_of(customer_id) == clock_id


def _next_due(sb: Sandbox, clock_id: str | None) -> tuple[int, str, Obj] | None:
    candidates: list[tuple[int, str, Obj]] = []
    for session in sb.store.objects["checkout.session"].values():
        if session["status"] == "open" and _follows(sb, session["customer"], clock_id):
            candidates.append((session["expires_at"], "expire", session))
    for sub in sb.store.objects["subscription"].values():
        if not _follows(sb, sub["customer"], clock_id):
            continue
        if sub["status"] in ("active", "past_due", "trialing"):
            candidates.append((_period(sub)[1], "renew", sub))
        if (
            sub["status"] == "trialing"
            and sb.store.priv(sub["id"]).get("trial_will_end_sent") != sub["trial_end"]
        ):
            notice = max(sub["trial_start"] or 0, sub["trial_end"] - TRIAL_WILL_END_NOTICE)
            candidates.append((notice, "trial_will_end", sub))
        if sub["status"] == "incomplete":
            candidates.append((sub["created"] + INCOMPLETE_EXPIRY, "expire_incomplete", sub))
    for invoice in sb.store.objects["invoice"].values():
        if (
            invoice["status"] == "open"
            and invoice["next_payment_attempt"] is not None
            and _follows(sb, invoice["customer"], clock_id)
        ):
            candidates.append((invoice["next_payment_attempt"], "retry", invoice))
    if not candidates:
        return None
    return min(candidates, key=lambda c: c[0])


def advance_to(sb: Sandbox, target: int, clock_id: str | None = None) -> None:
    """Process everything due up to `target` in time order, then set the clock to `target`.

    `clock_id` selects a test clock: only objects of its customers move, in its time.
    """
    from .checkout import expire_session

    with sb.on_clock(clock_id):
        hint = sb.due_hint if clock_id is None else None
        if hint is not None and hint[0] == sb.epoch and (hint[1] is None or hint[1] > target):
            # Nothing changed since the last look and nothing it found is due yet: every read
            # request lands here instead of scanning every session, subscription and invoice.
            sb.clock.set_now(target)
            return
        due = None
        for _ in range(10_000):  # a bound, not a schedule: far more than any test advances through
            due = _next_due(sb, clock_id)
            if due is None or due[0] > target:
                break
            when, action, obj = due
            sb.clock.set_now(when)
            if action == "expire":
                expire_session(sb, obj)
            elif action == "renew":
                renew(sb, obj)
            elif action == "trial_will_end":
                trial_will_end(sb, obj)
            elif action == "expire_incomplete":
                expire_incomplete(sb, obj)
            else:
                retry(sb, obj)
        sb.clock.set_now(target)
        if clock_id is None:
            sb.due_hint = (sb.epoch, due[0] if due is not None else None)


def change_items(sb: Sandbox, sub: Obj, new_items: list[Obj], behavior: str, at: int) -> Obj | None:
    """Apply a plan change; bill its prorations now (`always_invoice`) or with the next invoice.

    Returns the invoice made now, if any."""
    lines = plan_changes.apply(sb, sub, new_items, behavior, at)
    if not lines:
        return None
    if behavior != "always_invoice":
        plan_changes.pending_lines(sb, sub["id"]).extend(lines)
        return None
    customer = sb.get("customer", sub["customer"])
    invoice = _new_invoice(sb, sub, customer, "subscription_update", at, at, only_lines=lines)
    sub["latest_invoice"] = invoice["id"]
    if invoice["amount_due"] == 0:
        _mark_paid(sb, invoice)
    else:
        _collect(sb, invoice, sub)
    return invoice


def _next_period(sub: Obj) -> None:
    """Move a (copied) subscription's items to their next period, as a renewal would."""
    anchor = _day(sub["billing_cycle_anchor"])
    for item in sub["items"]["data"]:
        recurring = item["price"]["recurring"]
        end = item["current_period_end"]
        item["current_period_start"] = end
        item["current_period_end"] = add_interval(
            end, recurring["interval"], recurring["interval_count"], anchor
        )


def preview_invoice(sb: Sandbox, sub: Obj, new_items: list[Obj] | None, behavior: str, at: int) -> Obj:
    """What `invoices.create_preview` shows: the prorations of a change as of `at`, or the next
    renewal (with pending prorations) when no change is previewed."""
    customer = sb.get("customer", sub["customer"])
    start, end = _period(sub)
    bills_usage = sub["status"] != "trialing"  # usage during a trial is free
    planned = sb.snapshot(sub)
    if new_items is None:
        _next_period(planned)
        return _new_invoice(
            sb, planned, customer, "subscription_cycle", start, end, preview=True, bill_usage=bills_usage
        )
    lines = [] if behavior == "none" else plan_changes.proration_lines(sb, planned, new_items, at)
    planned["items"]["data"] = sb.snapshot({"items": new_items})["items"]
    if behavior == "always_invoice":
        return _new_invoice(
            sb, planned, customer, "subscription_update", at, at, only_lines=lines, preview=True
        )
    _next_period(planned)
    upcoming = _new_invoice(
        sb, planned, customer, "subscription_cycle", start, end, preview=True, bill_usage=bills_usage
    )
    for line in lines:
        line["invoice"] = None
    upcoming["lines"]["data"] = [*lines, *upcoming["lines"]["data"]]
    total = sum(int(line["amount"]) for line in upcoming["lines"]["data"])
    upcoming.update(
        subtotal=total,
        total=total,
        subtotal_excluding_tax=total,
        total_excluding_tax=total,
        amount_due=max(total, 0),
        amount_remaining=max(total, 0),
    )
    return upcoming
