"""Subscriptions, invoices and payments over the API."""

from __future__ import annotations

from . import billing, payments, plan_changes
from .api import Call, Obj, created_filter, includable, paginate
from .api_catalog import search
from .errors import invalid_request, resource_missing
from .forms import Params, merge_metadata
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
    with sb.on_clock(sb.clock_of(sub["customer"])):
        return _update_subscription(call, sub)


def _proration(p: Params, sb: Sandbox, sub: Obj, prefix_params: Params | None = None) -> tuple[str, int]:
    """`proration_behavior` and `proration_date` (default: now), validated."""
    source = prefix_params or p
    behavior = source.enum("proration_behavior", plan_changes.PRORATION_BEHAVIORS) or "create_prorations"
    at = source.integer("proration_date")
    now = sb.now()
    if at is None:
        at = now
    start, end = (
        sub["items"]["data"][0]["current_period_start"],
        sub["items"]["data"][0]["current_period_end"],
    )
    if not start <= at <= end:
        raise invalid_request(
            "proration_date must be within the current billing period.", param=source.param("proration_date")
        )
    return behavior, at


def _update_subscription(call: Call, sub: Obj) -> Obj:
    p, sb = call.params, call.sb
    before = sb.snapshot(sub)
    now = sb.now()
    changes = p.sub_list("items")
    if changes is not None or p.has("proration_behavior") or p.has("proration_date"):
        if sub["status"] not in ("active", "trialing", "past_due"):
            raise invalid_request(f"A subscription with status {sub['status']} cannot change its items.")
        behavior, at = _proration(p, sb, sub)
        new_items = plan_changes.planned_items(sb, sub, changes or [])
    if p.has("cancel_at") and p.raw("cancel_at") != "":
        wanted_cancel = p.integer("cancel_at")
        if wanted_cancel is not None and wanted_cancel <= now:
            raise invalid_request("cancel_at must be in the future.", param="cancel_at")
    pm_id = p.string("default_payment_method", allow_empty=True) if p.has("default_payment_method") else None
    pm = None
    if pm_id:
        pm = call.payment_method(pm_id, "default_payment_method")
        if pm["customer"] != sub["customer"]:
            raise invalid_request(
                f"The customer does not have a payment method with the ID {pm_id}. The payment method must "
                "be attached to the customer.",
                param="default_payment_method",
            )
    if p.has("default_payment_method"):
        sub["default_payment_method"] = None if pm is None else pm["id"]
    if changes is not None:
        billing.change_items(sb, sub, new_items, behavior, at)
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


def create_preview(call: Call) -> Obj:
    """`invoices.create_preview` for a subscription: its next invoice, or what a change would bill."""
    p, sb = call.params, call.sb
    sub_id = p.string("subscription")
    if sub_id is None:
        raise invalid_request(
            "The sandbox previews subscription invoices only: pass `subscription`.", param="subscription"
        )
    sub = sb.store.get("subscription", sub_id)
    if sub is None:
        raise resource_missing("subscription", sub_id, param="subscription")
    customer_id = p.string("customer")
    if customer_id is not None and customer_id != sub["customer"]:
        raise invalid_request("The subscription does not belong to this customer.", param="customer")
    with sb.on_clock(sb.clock_of(sub["customer"])):
        details = p.sub("subscription_details")
        changes = None if details is None else details.sub_list("items")
        behavior, at = (
            _proration(p, sb, sub, details) if details is not None else ("create_prorations", sb.now())
        )
        new_items = None if changes is None else plan_changes.planned_items(sb, sub, changes)
        return billing.preview_invoice(sb, sub, new_items, behavior, at)


def list_subscription_items(call: Call) -> Obj:
    sub = call.sb.get("subscription", call.params.req_str("subscription"), param="subscription")
    return paginate(call.params, list(sub["items"]["data"]), call.route_path, "subscription_item")


def retrieve_balance_transaction(call: Call) -> Obj:
    return call.sb.get("balance_transaction", call.path["id"])


def list_balance_transactions(call: Call) -> Obj:
    p = call.params
    items = call.sb.store.newest_first("balance_transaction")
    for key in ("source", "type", "currency"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i[key] == value]
    return paginate(p, created_filter(p, items), call.route_path, "balance_transaction")


def update_dispute(call: Call) -> Obj:
    p, sb = call.params, call.sb
    dispute = sb.get("dispute", call.path["id"])
    evidence: dict[str, str] = {}
    given = p.sub("evidence")
    if given is not None:
        for key in payments.DISPUTE_EVIDENCE:
            if given.has(key):
                text = given.string(key, allow_empty=True) or ""
                if len(text) > 20_000:
                    raise invalid_request(
                        "Evidence text can have up to 20000 characters.", param=given.param(key)
                    )
                evidence[key] = text
    metadata = p.metadata()
    with sb.on_clock(sb.clock_of(dispute.get("customer"))):
        if metadata is not None:
            dispute["metadata"] = merge_metadata(
                dispute["metadata"], metadata, whole_cleared=p.raw("metadata") == ""
            )
        return payments.update_dispute(sb, dispute, evidence, bool(p.boolean("submit")))


def close_dispute(call: Call) -> Obj:
    return payments.close_dispute(call.sb, call.sb.get("dispute", call.path["id"]))
