"""Subscription lifecycle: start, renew, retry failed payments, cancel.

Every state change goes through `Sandbox.emit` so webhooks see what Stripe would send. The
renewal and retry schedule is driven by the sandbox clock (`clocks.advance_to`), which processes
due work strictly in time order so that advancing three months renews three times.
"""

from __future__ import annotations

import calendar
import datetime as dt
from typing import Any

from . import meters, plan_changes
from . import objects_billing as objects_billing
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


def current_period(subscription: Obj) -> tuple[int, int]:
    item = subscription["items"]["data"][0]
    return int(item["current_period_start"]), int(item["current_period_end"])


def start_subscription(
    sandbox: Sandbox,
    *,
    customer: Obj,
    recurring_items: list[tuple[Obj, int | None]],
    one_time_items: list[tuple[Obj, int]],
    metadata: dict[str, str],
    payment_method: Obj | None,
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
    now = sandbox.now()
    subscription_id = new_id("sub")
    first_recurring = recurring_items[0][0]["recurring"]
    if trial_end is not None:
        end = trial_end
    else:
        end = add_interval(now, first_recurring["interval"], first_recurring["interval_count"], _day(now))
    items = [
        objects_billing.subscription_item(
            id_=new_id("si"),
            now=now,
            subscription_id=subscription_id,
            price=price,
            quantity=quantity,
            start=now,
            end=end,
        )
        for price, quantity in recurring_items
    ]
    subscription = objects_billing.subscription(
        id_=subscription_id,
        now=now,
        customer_id=customer["id"],
        currency=recurring_items[0][0]["currency"],
        items=items,
        metadata=metadata,
    )
    subscription.update(
        default_payment_method=None if payment_method is None else payment_method["id"],
        description=description,
        test_clock=customer.get("test_clock"),
    )
    subscription["trial_settings"]["end_behavior"]["missing_payment_method"] = missing_payment_method
    if trial_end is not None:
        subscription.update(
            status="trialing", trial_start=now, trial_end=trial_end, billing_cycle_anchor=trial_end
        )
    else:
        subscription["status"] = "incomplete"
    sandbox.store.put(subscription)
    extra = [
        {"id": new_id("si"), "price": price, "quantity": quantity} for price, quantity in one_time_items
    ]  # one-time prices bill once, on the first invoice only
    invoice = _new_invoice(
        sandbox, subscription, customer, "subscription_create", now, now, extra, trial=trial_end is not None
    )
    subscription["latest_invoice"] = invoice["id"]
    # The creation event carries the subscription as created (incomplete or trialing); becoming
    # active is the `customer.subscription.updated` that follows, as on Stripe. With
    # `error_if_incomplete` a failed first payment means no subscription, so the event waits.
    all_or_nothing = payment_behavior == "error_if_incomplete" and trial_end is None
    before = sandbox.snapshot(subscription)
    if not all_or_nothing:
        sandbox.emit("customer.subscription.created", subscription)
    if trial_end is not None or invoice["amount_due"] == 0:
        _mark_paid(sandbox, invoice)
        if subscription["status"] == "incomplete":
            subscription["status"] = "active"
    elif payment_behavior != "default_incomplete":
        if _collect(sandbox, invoice, subscription):
            subscription["status"] = "active"
        elif all_or_nothing:
            decline = sandbox.store.priv(invoice["id"]).get("last_decline") or RENEWAL_DECLINE_ARGS
            sandbox.store.remove("subscription", subscription["id"])
            invoice.update(status="void", amount_remaining=0, next_payment_attempt=None)
            invoice["status_transitions"]["voided_at"] = now
            raise StripeError(402, decline[2], type_="card_error", code=decline[0], decline_code=decline[1])
    if all_or_nothing:
        sandbox.emit("customer.subscription.created", before)
    sandbox.emit_updated("customer.subscription.updated", before, subscription)
    return subscription, invoice


RENEWAL_DECLINE_ARGS = ("card_declined", "generic_decline", "Your card was declined.")


def _mark_paid(sandbox: Sandbox, invoice: Obj) -> None:
    """A zero-amount invoice (a trial's first one) is paid without a payment."""
    now = sandbox.now()
    before = sandbox.snapshot(invoice)
    invoice.update(
        status="paid", amount_paid=0, amount_remaining=0, attempted=True, next_payment_attempt=None
    )
    invoice["status_transitions"]["paid_at"] = now
    sandbox.emit_updated("invoice.updated", before, invoice)
    sandbox.emit("invoice.paid", invoice)
    sandbox.emit("invoice.payment_succeeded", invoice)


def payment_method_for(sandbox: Sandbox, subscription: Obj) -> Obj | None:
    """What a subscription's invoices are charged to: its own default, else its customer's."""
    payment_method_id = subscription["default_payment_method"]
    if payment_method_id is None:
        customer = sandbox.store.get("customer", subscription["customer"]) or {}
        payment_method_id = (customer.get("invoice_settings") or {}).get("default_payment_method")
    return None if payment_method_id is None else sandbox.store.get("payment_method", payment_method_id)


def _day(timestamp: int) -> int:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).day


def _new_invoice(
    sandbox: Sandbox,
    subscription: Obj,
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
    item_start, item_end = current_period(subscription)
    if bill_usage is None:
        bill_usage = reason == "subscription_cycle" and not trial
    lines = [
        _item_line(
            sandbox,
            subscription,
            item,
            invoice_id,
            (start, end) if bill_usage else None,
            (item_start, item_end),
        )
        for item in subscription["items"]["data"]
    ]
    if only_lines is not None:
        lines = only_lines
    elif not trial and reason == "subscription_cycle":
        pending = plan_changes.pending_lines(sandbox, subscription["id"])
        lines = [*pending, *lines]
        if not preview:
            pending.clear()
    for line in lines:
        line["invoice"] = invoice_id
    if trial:
        for line in lines:
            line.update(amount=0, subtotal=0, description=f"Trial period for {line['description']}")
    for item in extra_items or []:
        line = objects_billing.invoice_line(
            id_=new_id("il"),
            invoice_id=invoice_id,
            item=item,
            subscription_id=subscription["id"],
            start=start,
            end=start,
        )
        line["parent"]["subscription_item_details"]["subscription_item"] = None
        lines.append(line)
    sequence = customer["next_invoice_sequence"]
    if not preview:
        customer["next_invoice_sequence"] = sequence + 1
    invoice = objects_billing.invoice(
        id_=invoice_id,
        now=sandbox.now(),
        customer=customer,
        subscription=subscription,
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
    sandbox.store.put(invoice)
    invoice["hosted_invoice_url"] = page_url(sandbox, "i", invoice_id)
    sandbox.emit("invoice.created", invoice)
    sandbox.emit("invoice.finalized", invoice)
    return invoice


def _item_line(
    sandbox: Sandbox,
    subscription: Obj,
    item: Obj,
    invoice_id: str,
    usage_period: tuple[int, int] | None,
    period: tuple[int, int],
) -> Obj:
    if is_metered(item["price"]) and usage_period is not None:
        meter = sandbox.store.get("billing.meter", item["price"]["recurring"]["meter"])
        # An item added during the period counts usage from when it was added.
        counted = (max(usage_period[0], int(item["created"])), usage_period[1])
        used = 0 if meter is None else meters.usage(sandbox, meter, subscription["customer"], *counted)
        return objects_billing.invoice_line(
            id_=new_id("il"),
            invoice_id=invoice_id,
            item=item,
            subscription_id=subscription["id"],
            start=counted[0],
            end=counted[1],
            usage=used,
        )
    return objects_billing.invoice_line(
        id_=new_id("il"),
        invoice_id=invoice_id,
        item=item,
        subscription_id=subscription["id"],
        start=period[0],
        end=period[1],
    )


def _usage_lines(sandbox: Sandbox, subscription: Obj, start: int, end: int) -> list[Obj]:
    """The metered items' lines for `[start, end)` alone: a subscription's final usage invoice."""
    return [
        _item_line(sandbox, subscription, item, "", (start, end), (start, end))
        for item in subscription["items"]["data"]
        if is_metered(item["price"])
    ]


AUTHENTICATION_REQUIRED = Decline(
    "authentication_required",
    "authentication_required",
    "Your card was declined. This transaction requires authentication.",
)


def _collect(sandbox: Sandbox, invoice: Obj, subscription: Obj, payment_method: Obj | None = None) -> bool:
    """One payment attempt on an open invoice with `pm`, else the subscription's payment method."""
    payment_method = payment_method or payment_method_for(sandbox, subscription)
    renewal = invoice["billing_reason"] != "subscription_create"
    decline: Decline | None
    payment_intent: Obj | None = None
    invoice["attempted"] = True
    invoice["attempt_count"] += 1
    if payment_method is None:
        decline = Decline("invoice_no_customer_source", None, "This customer has no attached payment source.")
    else:
        decline = decline_of(sandbox.store.priv(payment_method["id"])["card"])
        if decline is None and renewal and sandbox.store.priv(invoice["customer"]).get("fail_renewals"):
            decline = RENEWAL_DECLINE
        payment_intent = new_payment_intent(
            sandbox,
            amount=invoice["amount_due"],
            currency=invoice["currency"],
            customer_id=invoice["customer"],
            payment_method=payment_method,
            description="Subscription update" if renewal else "Subscription creation",
        )
        sandbox.store.priv(payment_intent["id"])["invoice"] = invoice["id"]
        if decline is None and needs_authentication(sandbox, payment_method):
            if not renewal:  # on-session: the customer is sent through 3-D Secure
                request_authentication(sandbox, payment_intent, payment_method, None)
                sandbox.store.priv(invoice["id"])["last_decline"] = [
                    AUTHENTICATION_REQUIRED.code,
                    AUTHENTICATION_REQUIRED.decline_code,
                    AUTHENTICATION_REQUIRED.message,
                ]
                invoice["next_payment_attempt"] = None
                sandbox.emit("invoice.payment_action_required", invoice)
                return False
            decline = AUTHENTICATION_REQUIRED
        confirm(sandbox, payment_intent, payment_method, decline)
    if decline is not None:
        sandbox.store.priv(invoice["id"])["last_decline"] = [
            decline.code,
            decline.decline_code,
            decline.message,
        ]
        retries = sandbox.config.renewal_retry_days
        if renewal and invoice["attempt_count"] <= len(retries):
            invoice["next_payment_attempt"] = sandbox.now() + retries[invoice["attempt_count"] - 1] * DAY
        else:
            invoice["next_payment_attempt"] = None
        sandbox.emit("invoice.payment_failed", invoice)
        return False
    assert payment_intent is not None
    record_payment(sandbox, invoice, payment_intent)
    return True


def record_payment(sandbox: Sandbox, invoice: Obj, payment_intent: Obj) -> None:
    """`pi` succeeded for `invoice`: the invoice is paid."""
    now = sandbox.now()
    payment = objects_billing.invoice_payment(
        id_=new_id("inpay"), now=now, invoice=invoice, payment_intent_id=payment_intent["id"]
    )
    payment.update(amount_paid=invoice["amount_due"], status="paid")
    payment["status_transitions"]["paid_at"] = now
    sandbox.store.put(payment)
    before = sandbox.snapshot(invoice)
    invoice.update(
        status="paid", amount_paid=invoice["amount_due"], amount_remaining=0, next_payment_attempt=None
    )
    invoice["status_transitions"]["paid_at"] = now
    sandbox.emit_updated("invoice.updated", before, invoice)
    sandbox.emit("invoice.paid", invoice)
    sandbox.emit("invoice.payment_succeeded", invoice)


def authenticated(sandbox: Sandbox, payment_intent: Obj, ok: bool) -> None:
    """The cardholder passed (or failed) the 3-D Secure challenge for `pi`."""
    payment_method = sandbox.get("payment_method", payment_intent["payment_method"])
    if not ok:
        payment_intent.update(
            status="requires_payment_method",
            next_action=None,
            payment_method=None,
            last_payment_error={
                "type": "invalid_request_error",
                "code": "payment_intent_authentication_failure",
                "message": "The provided PaymentMethod has failed authentication. You can provide "
                "payment_method_data or a new PaymentMethod to attempt to fulfill this PaymentIntent again.",
                "payment_method": sandbox.snapshot(payment_method),
            },
        )
        sandbox.emit("payment_intent.payment_failed", payment_intent)
        return
    sandbox.store.priv(payment_method["id"])["authenticated"] = True
    confirm(
        sandbox, payment_intent, payment_method, decline_of(sandbox.store.priv(payment_method["id"])["card"])
    )
    invoice_id = sandbox.store.priv(payment_intent["id"]).get("invoice")
    invoice = None if invoice_id is None else sandbox.store.get("invoice", invoice_id)
    if payment_intent["status"] != "succeeded" or invoice is None or invoice["status"] != "open":
        return
    record_payment(sandbox, invoice, payment_intent)
    subscription_id = subscription_of(invoice)
    subscription = None if subscription_id is None else sandbox.store.get("subscription", subscription_id)
    if (
        subscription is not None
        and subscription["status"] in ("incomplete", "past_due")
        and not _open_invoices(sandbox, subscription["id"])
    ):
        before = sandbox.snapshot(subscription)
        subscription["status"] = "active"
        sandbox.emit_updated("customer.subscription.updated", before, subscription)


def pay_invoice(sandbox: Sandbox, invoice: Obj, payment_method: Obj | None) -> Obj:
    """`invoices.pay`: collect an open invoice now; a subscription it completes becomes active."""
    if invoice["status"] == "paid":
        raise invalid_request("Invoice is already paid.", code="invoice_already_paid")
    if invoice["status"] != "open":
        raise invalid_request(f"You can only pay an open invoice (this one is {invoice['status']}).")
    subscription_id = subscription_of(invoice)
    subscription = sandbox.get("subscription", subscription_id) if subscription_id else None
    if subscription is None:
        raise invalid_request("The sandbox only pays subscription invoices.")
    before = sandbox.snapshot(subscription)
    if not _collect(sandbox, invoice, subscription, payment_method):
        decline = sandbox.store.priv(invoice["id"])["last_decline"]
        raise StripeError(402, decline[2], type_="card_error", code=decline[0], decline_code=decline[1])
    if subscription["status"] in ("incomplete", "past_due", "unpaid") and not _open_invoices(
        sandbox, subscription["id"]
    ):
        subscription["status"] = "active"
    if payment_method is not None and subscription["default_payment_method"] is None:
        subscription["default_payment_method"] = payment_method["id"]
    sandbox.emit_updated("customer.subscription.updated", before, subscription)
    return invoice


def _open_invoices(sandbox: Sandbox, subscription_id: str) -> list[Obj]:
    return [
        candidate
        for candidate in sandbox.store.objects["invoice"].values()
        if subscription_of(candidate) == subscription_id and candidate["status"] == "open"
    ]


def renew(sandbox: Sandbox, subscription: Obj) -> None:
    """The period ended: end a subscription scheduled to cancel, or bill the next period."""
    start, end = current_period(subscription)
    if subscription["cancel_at_period_end"] or (
        subscription["cancel_at"] is not None and subscription["cancel_at"] <= end
    ):
        if subscription["status"] != "trialing":
            _final_usage_invoice(sandbox, subscription, start, end)
        cancel_now(
            sandbox,
            subscription,
            ended_at=end,
            reason=subscription["cancellation_details"]["reason"] or "cancellation_requested",
        )
        return
    before = sandbox.snapshot(subscription)
    anchor = _day(subscription["billing_cycle_anchor"])
    for item in subscription["items"]["data"]:
        recurring = item["price"]["recurring"]
        item["current_period_start"] = end
        item["current_period_end"] = add_interval(
            end, recurring["interval"], recurring["interval_count"], anchor
        )
    customer = sandbox.get("customer", subscription["customer"])
    trial_over = subscription["status"] == "trialing"
    if trial_over and payment_method_for(sandbox, subscription) is None:
        behavior = subscription["trial_settings"]["end_behavior"]["missing_payment_method"]
        if behavior == "cancel":
            cancel_now(sandbox, subscription, ended_at=end, reason="cancellation_requested")
            return
        if behavior == "pause":
            subscription["status"] = "paused"
            subscription["pause_collection"] = None
            sandbox.emit("customer.subscription.paused", subscription)
            sandbox.emit_updated("customer.subscription.updated", before, subscription)
            return
    invoice = _new_invoice(
        sandbox, subscription, customer, "subscription_cycle", start, end, bill_usage=not trial_over
    )
    subscription["latest_invoice"] = invoice["id"]
    if invoice["amount_due"] == 0:  # nothing used and nothing owed: paid without a charge
        _mark_paid(sandbox, invoice)
        subscription["status"] = "active"
    elif _collect(sandbox, invoice, subscription):
        subscription["status"] = "active"
    else:
        subscription["status"] = "past_due"
    sandbox.emit_updated("customer.subscription.updated", before, subscription)


def _final_usage_invoice(sandbox: Sandbox, subscription: Obj, start: int, end: int) -> None:
    """A subscription ending at period end still owes what its meters counted in that period."""
    lines = _usage_lines(sandbox, subscription, start, end)
    if not any(line["amount"] for line in lines):
        return
    customer = sandbox.get("customer", subscription["customer"])
    invoice = _new_invoice(
        sandbox, subscription, customer, "subscription_cycle", start, end, only_lines=lines
    )
    subscription["latest_invoice"] = invoice["id"]
    _collect(sandbox, invoice, subscription)


def trial_will_end(sandbox: Sandbox, subscription: Obj) -> None:
    """Three days before a trial ends (or at once for a shorter trial), as Stripe sends it."""
    sandbox.store.priv(subscription["id"])["trial_will_end_sent"] = subscription["trial_end"]
    sandbox.emit("customer.subscription.trial_will_end", subscription)


def expire_incomplete(sandbox: Sandbox, subscription: Obj) -> None:
    """An `incomplete` subscription whose first invoice was not paid within 23 hours."""
    before = sandbox.snapshot(subscription)
    subscription.update(status="incomplete_expired", ended_at=sandbox.now())
    for invoice in _open_invoices(sandbox, subscription["id"]):
        invoice_before = sandbox.snapshot(invoice)
        invoice.update(status="void", amount_remaining=0, next_payment_attempt=None)
        invoice["status_transitions"]["voided_at"] = sandbox.now()
        sandbox.emit("invoice.voided", invoice)
        sandbox.emit_updated("invoice.updated", invoice_before, invoice)
    sandbox.emit_updated("customer.subscription.updated", before, subscription)
    sandbox.emit("customer.subscription.deleted", subscription)


def retry(sandbox: Sandbox, invoice: Obj) -> None:
    """A scheduled retry of a failed renewal payment."""
    subscription_id = invoice["parent"]["subscription_details"]["subscription"]
    subscription = sandbox.get("subscription", subscription_id)
    if subscription["status"] in ("canceled", "incomplete_expired"):
        invoice["next_payment_attempt"] = None
        return
    before = sandbox.snapshot(subscription)
    if _collect(sandbox, invoice, subscription):
        if subscription["status"] in ("past_due", "unpaid") and all(
            candidate["status"] != "open"
            for candidate in sandbox.store.objects["invoice"].values()
            if subscription_of(candidate) == subscription_id
        ):
            subscription["status"] = "active"
        sandbox.emit_updated("customer.subscription.updated", before, subscription)
        return
    if invoice["next_payment_attempt"] is None:
        if sandbox.config.final_failure_status == "canceled":
            cancel_now(sandbox, subscription, ended_at=sandbox.now(), reason="payment_failed")
            return
        subscription["status"] = "unpaid"
        sandbox.emit_updated("customer.subscription.updated", before, subscription)


def subscription_of(invoice: Obj) -> str | None:
    details = (invoice.get("parent") or {}).get("subscription_details") or {}
    value = details.get("subscription")
    return None if value is None else str(value)


def schedule_cancel(sandbox: Sandbox, subscription: Obj, flag: bool) -> None:
    """`cancel_at_period_end`, with the fields Stripe sets alongside it in the pinned version."""
    subscription["cancel_at_period_end"] = flag
    subscription["cancel_at"] = current_period(subscription)[1] if flag else None
    subscription["canceled_at"] = sandbox.now() if flag else None
    subscription["cancellation_details"]["reason"] = "cancellation_requested" if flag else None


def cancel_now(sandbox: Sandbox, subscription: Obj, *, ended_at: int, reason: str) -> None:
    now = sandbox.now()
    subscription["status"] = "canceled"
    subscription["ended_at"] = ended_at
    subscription["canceled_at"] = subscription["canceled_at"] or now
    subscription["cancellation_details"]["reason"] = reason
    for invoice in sandbox.store.objects["invoice"].values():
        if subscription_of(invoice) == subscription["id"] and invoice["status"] == "open":
            invoice["next_payment_attempt"] = None
    sandbox.emit("customer.subscription.deleted", subscription)


def change_items(
    sandbox: Sandbox, subscription: Obj, new_items: list[Obj], behavior: str, at: int
) -> Obj | None:
    """Apply a plan change; bill its prorations now (`always_invoice`) or with the next invoice.

    Returns the invoice made now, if any."""
    lines = plan_changes.apply(sandbox, subscription, new_items, behavior, at)
    if not lines:
        return None
    if behavior != "always_invoice":
        plan_changes.pending_lines(sandbox, subscription["id"]).extend(lines)
        return None
    customer = sandbox.get("customer", subscription["customer"])
    invoice = _new_invoice(sandbox, subscription, customer, "subscription_update", at, at, only_lines=lines)
    subscription["latest_invoice"] = invoice["id"]
    if invoice["amount_due"] == 0:
        _mark_paid(sandbox, invoice)
    else:
        _collect(sandbox, invoice, subscription)
    return invoice


def _next_period(subscription: Obj) -> None:
    """Move a (copied) subscription's items to their next period, as a renewal would."""
    anchor = _day(subscription["billing_cycle_anchor"])
    for item in subscription["items"]["data"]:
        recurring = item["price"]["recurring"]
        end = item["current_period_end"]
        item["current_period_start"] = end
        item["current_period_end"] = add_interval(
            end, recurring["interval"], recurring["interval_count"], anchor
        )


def preview_invoice(
    sandbox: Sandbox, subscription: Obj, new_items: list[Obj] | None, behavior: str, at: int
) -> Obj:
    """What `invoices.create_preview` shows: the prorations of a change as of `at`, or the next
    renewal (with pending prorations) when no change is previewed."""
    customer = sandbox.get("customer", subscription["customer"])
    start, end = current_period(subscription)
    bills_usage = subscription["status"] != "trialing"  # usage during a trial is free
    planned = sandbox.snapshot(subscription)
    if new_items is None:
        _next_period(planned)
        return _new_invoice(
            sandbox, planned, customer, "subscription_cycle", start, end, preview=True, bill_usage=bills_usage
        )
    lines = [] if behavior == "none" else plan_changes.proration_lines(sandbox, planned, new_items, at)
    planned["items"]["data"] = sandbox.snapshot({"items": new_items})["items"]
    if behavior == "always_invoice":
        return _new_invoice(
            sandbox, planned, customer, "subscription_update", at, at, only_lines=lines, preview=True
        )
    _next_period(planned)
    upcoming = _new_invoice(
        sandbox, planned, customer, "subscription_cycle", start, end, preview=True, bill_usage=bills_usage
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
