"""Subscriptions, invoices and payments over the API."""

from __future__ import annotations

from . import billing, payments
from .api import Call, Obj, created_filter, includable, paginate
from .api_catalog import search
from .errors import invalid_request, resource_missing
from .forms import merge_metadata
from .objects import list_envelope
from .sandbox import Sandbox

_LIVE = ("active", "past_due", "unpaid", "trialing", "incomplete", "paused")


# Subscriptions ---------------------------------------------------------------------------------


def retrieve_subscription(call: Call) -> Obj:
    return call.sb.get("subscription", call.path["id"])


def update_subscription(call: Call) -> Obj:
    call.allow("subscription.update")
    p, sb = call.params, call.sb
    sub = sb.get("subscription", call.path["id"])
    if sub["status"] == "canceled" and set(p.tree) - {"metadata", "cancellation_details", "expand"}:
        raise invalid_request(
            "A canceled subscription can only update its cancellation_details and metadata."
        )
    for unsupported in (
        "items",
        "trial_end",
        "pause_collection",
        "billing_cycle_anchor",
        "add_invoice_items",
    ):
        if p.has(unsupported):
            raise invalid_request(
                f"The Stripe sandbox does not implement updating `{unsupported}`.", param=unsupported
            )
    before = sb.snapshot(sub)
    now = sb.now()
    period_end = sub["items"]["data"][0]["current_period_end"]
    if p.has("cancel_at_period_end"):
        billing.schedule_cancel(sb, sub, bool(p.boolean("cancel_at_period_end")))
    if p.has("cancel_at"):
        cancel_at = p.integer("cancel_at") if p.raw("cancel_at") != "" else None
        if cancel_at is not None and cancel_at <= now:
            raise invalid_request("cancel_at must be in the future.", param="cancel_at")
        sub["cancel_at"] = cancel_at
        sub["cancel_at_period_end"] = cancel_at is not None and cancel_at == period_end
        sub["canceled_at"] = now if cancel_at is not None else None
        sub["cancellation_details"]["reason"] = "cancellation_requested" if cancel_at is not None else None
    details = p.sub("cancellation_details")
    if details is not None:
        for key in ("comment", "feedback"):
            if details.has(key):
                sub["cancellation_details"][key] = details.string(key, allow_empty=True) or None
    if p.has("description"):
        sub["description"] = p.string("description", allow_empty=True) or None
    sub["metadata"] = merge_metadata(sub["metadata"], p.metadata(), whole_cleared=p.raw("metadata") == "")
    sb.emit_updated("customer.subscription.updated", before, sub)
    return sub


def cancel_subscription(call: Call) -> Obj:
    call.allow("subscription.cancel")
    p, sb = call.params, call.sb
    sub = sb.get("subscription", call.path["id"])
    if sub["status"] == "canceled":
        raise invalid_request(
            f"A canceled subscription can only update its cancellation_details and metadata. "
            f"Subscription {sub['id']} is already canceled."
        )
    details = p.sub("cancellation_details")
    if details is not None:
        for key in ("comment", "feedback"):
            if details.has(key):
                sub["cancellation_details"][key] = details.string(key, allow_empty=True) or None
    sub["canceled_at"] = sb.now()
    billing.cancel_now(sb, sub, ended_at=sb.now(), reason="cancellation_requested")
    return sub


def list_subscriptions(call: Call) -> Obj:
    call.allow("subscription.list")
    p = call.params
    items = call.sb.store.newest_first("subscription")
    status = p.enum(
        "status",
        (
            "active",
            "all",
            "canceled",
            "ended",
            "incomplete",
            "incomplete_expired",
            "past_due",
            "paused",
            "trialing",
            "unpaid",
        ),
    )
    if status is None:
        items = [i for i in items if i["status"] != "canceled"]
    elif status == "ended":
        items = [i for i in items if i["status"] in ("canceled", "incomplete_expired")]
    elif status != "all":
        items = [i for i in items if i["status"] == status]
    customer = p.string("customer")
    if customer is not None:
        items = [i for i in items if i["customer"] == customer]
    price = p.string("price")
    if price is not None:
        items = [i for i in items if any(it["price"]["id"] == price for it in i["items"]["data"])]
    return paginate(p, created_filter(p, items), call.route_path, "subscription")


def search_subscriptions(call: Call) -> Obj:
    return search(call, "subscription", "subscription.search", ("status", "customer"))


# Invoices ---------------------------------------------------------------------------------------


def retrieve_invoice(call: Call) -> Obj:
    return call.sb.get("invoice", call.path["id"])


def list_invoices(call: Call) -> Obj:
    call.allow("invoice.list")
    p = call.params
    items = call.sb.store.newest_first("invoice")
    for key in ("customer", "status", "collection_method"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i[key] == value]
    sub = p.string("subscription")
    if sub is not None:
        items = [i for i in items if billing._sub_of(i) == sub]
    return paginate(p, created_filter(p, items), call.route_path, "invoice")


def list_invoice_lines(call: Call) -> Obj:
    invoice = call.sb.get("invoice", call.path["id"])
    return paginate(call.params, list(invoice["lines"]["data"]), call.route_path, "line_item")


@includable("invoice", "payments")
def _invoice_payments(sb: Sandbox, invoice: Obj) -> Obj:
    payments = [x for x in sb.store.newest_first("invoice_payment") if x["invoice"] == invoice["id"]]
    return list_envelope(payments, f"/v1/invoice_payments?invoice={invoice['id']}")


def retrieve_invoice_payment(call: Call) -> Obj:
    return call.sb.get("invoice_payment", call.path["id"])


def list_invoice_payments(call: Call) -> Obj:
    call.allow("invoice_payment.list")
    p = call.params
    items = call.sb.store.newest_first("invoice_payment")
    invoice = p.string("invoice")
    if invoice is not None:
        items = [i for i in items if i["invoice"] == invoice]
    payment = p.sub("payment")
    if payment is not None and payment.has("payment_intent"):
        pi = payment.string("payment_intent")
        items = [i for i in items if i["payment"].get("payment_intent") == pi]
    status = p.string("status")
    if status is not None:
        items = [i for i in items if i["status"] == status]
    return paginate(p, items, call.route_path, "invoice_payment")


# Charges, payment intents, payment methods, refunds, disputes ---------------------------------


def retrieve_charge(call: Call) -> Obj:
    return call.sb.get("charge", call.path["id"])


@includable("charge", "refunds")
def _charge_refunds(sb: Sandbox, ch: Obj) -> Obj:
    refunds = [r for r in sb.store.newest_first("refund") if r["charge"] == ch["id"]]
    return list_envelope(refunds, f"/v1/charges/{ch['id']}/refunds")


def list_charges(call: Call) -> Obj:
    call.allow("charge.list")
    p = call.params
    items = call.sb.store.newest_first("charge")
    for key in ("customer", "payment_intent"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i[key] == value]
    return paginate(p, created_filter(p, items), call.route_path, "charge")


def retrieve_payment_intent(call: Call) -> Obj:
    return call.sb.get("payment_intent", call.path["id"])


def list_payment_intents(call: Call) -> Obj:
    call.allow("payment_intent.list")
    p = call.params
    items = call.sb.store.newest_first("payment_intent")
    customer = p.string("customer")
    if customer is not None:
        items = [i for i in items if i["customer"] == customer]
    return paginate(p, created_filter(p, items), call.route_path, "payment_intent")


def retrieve_payment_method(call: Call) -> Obj:
    return call.sb.get("payment_method", call.path["id"])


def create_refund(call: Call) -> Obj:
    call.allow("refund.create")
    p, sb = call.params, call.sb
    charge_id = p.string("charge")
    pi_id = p.string("payment_intent")
    if charge_id is None and pi_id is None:
        raise invalid_request("One of `charge` or `payment_intent` is required.")
    if charge_id is None:
        assert pi_id is not None
        pi = sb.store.get("payment_intent", pi_id)
        if pi is None:
            raise resource_missing("payment_intent", pi_id, param="payment_intent")
        if pi["latest_charge"] is None:
            raise invalid_request(f"PaymentIntent {pi_id} does not have a successful charge to refund.")
        charge_id = pi["latest_charge"]
    ch = sb.store.get("charge", charge_id)
    if ch is None:
        raise resource_missing("charge", charge_id, param="charge")
    reason = p.enum("reason", ("duplicate", "fraudulent", "requested_by_customer"))
    return payments.refund_charge(sb, ch, p.integer("amount"), reason, p.metadata() or {})


def retrieve_refund(call: Call) -> Obj:
    return call.sb.get("refund", call.path["id"])


def list_refunds(call: Call) -> Obj:
    call.allow("refund.list")
    p = call.params
    items = call.sb.store.newest_first("refund")
    for key in ("charge", "payment_intent"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i[key] == value]
    return paginate(p, created_filter(p, items), call.route_path, "refund")


def retrieve_dispute(call: Call) -> Obj:
    return call.sb.get("dispute", call.path["id"])


def list_disputes(call: Call) -> Obj:
    call.allow("dispute.list")
    p = call.params
    items = call.sb.store.newest_first("dispute")
    for key in ("charge", "payment_intent"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i[key] == value]
    return paginate(p, created_filter(p, items), call.route_path, "dispute")
