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
    return call.sandbox.get("subscription", call.path["id"])


def update_subscription(call: Call) -> Obj:
    call.allow("subscription.update")
    p, sandbox = call.params, call.sandbox
    subscription = sandbox.get("subscription", call.path["id"])
    if subscription["status"] == "canceled" and set(p.tree) - {"metadata", "cancellation_details", "expand"}:
        raise invalid_request(
            "A canceled subscription can only update its cancellation_details and metadata."
        )
    with sandbox.on_clock(sandbox.clock_of(subscription["customer"])):
        return _update_subscription(call, subscription)


def _proration(
    p: Params, sandbox: Sandbox, subscription: Obj, prefix_params: Params | None = None
) -> tuple[str, int]:
    """`proration_behavior` and `proration_date` (default: now), validated."""
    source = prefix_params or p
    behavior = source.enum("proration_behavior", plan_changes.PRORATION_BEHAVIORS) or "create_prorations"
    at = source.integer("proration_date")
    now = sandbox.now()
    if at is None:
        at = now
    start, end = (
        subscription["items"]["data"][0]["current_period_start"],
        subscription["items"]["data"][0]["current_period_end"],
    )
    if not start <= at <= end:
        raise invalid_request(
            "proration_date must be within the current billing period.", param=source.param("proration_date")
        )
    return behavior, at


def _update_subscription(call: Call, subscription: Obj) -> Obj:
    p, sandbox = call.params, call.sandbox
    before = sandbox.snapshot(subscription)
    now = sandbox.now()
    changes = p.sub_list("items")
    if changes is not None or p.has("proration_behavior") or p.has("proration_date"):
        if subscription["status"] not in ("active", "trialing", "past_due"):
            raise invalid_request(
                f"A subscription with status {subscription['status']} cannot change its items."
            )
        behavior, at = _proration(p, sandbox, subscription)
        new_items = plan_changes.planned_items(sandbox, subscription, changes or [])
    if p.has("cancel_at") and p.raw("cancel_at") != "":
        wanted_cancel = p.integer("cancel_at")
        if wanted_cancel is not None and wanted_cancel <= now:
            raise invalid_request("cancel_at must be in the future.", param="cancel_at")
    payment_method_id = (
        p.string("default_payment_method", allow_empty=True) if p.has("default_payment_method") else None
    )
    payment_method = None
    if payment_method_id:
        payment_method = call.payment_method(payment_method_id, "default_payment_method")
        if payment_method["customer"] != subscription["customer"]:
            raise invalid_request(
                f"The customer does not have a payment method with "
                f"the ID {payment_method_id}. The payment method must "
                "be attached to the customer.",
                param="default_payment_method",
            )
    if p.has("default_payment_method"):
        subscription["default_payment_method"] = None if payment_method is None else payment_method["id"]
    if changes is not None:
        billing.change_items(sandbox, subscription, new_items, behavior, at)
    period_end = subscription["items"]["data"][0]["current_period_end"]
    if p.has("cancel_at_period_end"):
        billing.schedule_cancel(sandbox, subscription, bool(p.boolean("cancel_at_period_end")))
    if p.has("cancel_at"):
        cancel_at = p.integer("cancel_at") if p.raw("cancel_at") != "" else None
        if cancel_at is not None and cancel_at <= now:
            raise invalid_request("cancel_at must be in the future.", param="cancel_at")
        subscription["cancel_at"] = cancel_at
        subscription["cancel_at_period_end"] = cancel_at is not None and cancel_at == period_end
        subscription["canceled_at"] = now if cancel_at is not None else None
        subscription["cancellation_details"]["reason"] = (
            "cancellation_requested" if cancel_at is not None else None
        )
    details = p.sub("cancellation_details")
    if details is not None:
        for key in ("comment", "feedback"):
            if details.has(key):
                subscription["cancellation_details"][key] = details.string(key, allow_empty=True) or None
    if p.has("description"):
        subscription["description"] = p.string("description", allow_empty=True) or None
    subscription["metadata"] = merge_metadata(
        subscription["metadata"], p.metadata(), whole_cleared=p.raw("metadata") == ""
    )
    sandbox.emit_updated("customer.subscription.updated", before, subscription)
    return subscription


def cancel_subscription(call: Call) -> Obj:
    call.allow("subscription.cancel")
    p, sandbox = call.params, call.sandbox
    subscription = sandbox.get("subscription", call.path["id"])
    if subscription["status"] == "canceled":
        raise invalid_request(
            f"A canceled subscription can only update its cancellation_details and metadata. "
            f"Subscription {subscription['id']} is already canceled."
        )
    details = p.sub("cancellation_details")
    if details is not None:
        for key in ("comment", "feedback"):
            if details.has(key):
                subscription["cancellation_details"][key] = details.string(key, allow_empty=True) or None
    subscription["canceled_at"] = sandbox.now()
    billing.cancel_now(sandbox, subscription, ended_at=sandbox.now(), reason="cancellation_requested")
    return subscription


def list_subscriptions(call: Call) -> Obj:
    call.allow("subscription.list")
    p = call.params
    items = call.sandbox.store.newest_first("subscription")
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
    return call.sandbox.get("invoice", call.path["id"])


def list_invoices(call: Call) -> Obj:
    call.allow("invoice.list")
    p = call.params
    items = call.sandbox.store.newest_first("invoice")
    for key in ("customer", "status", "collection_method"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i[key] == value]
    subscription = p.string("subscription")
    if subscription is not None:
        items = [i for i in items if billing.subscription_of(i) == subscription]
    return paginate(p, created_filter(p, items), call.route_path, "invoice")


def list_invoice_lines(call: Call) -> Obj:
    invoice = call.sandbox.get("invoice", call.path["id"])
    return paginate(call.params, list(invoice["lines"]["data"]), call.route_path, "line_item")


@includable("invoice", "payments")
def _invoice_payments(sandbox: Sandbox, invoice: Obj) -> Obj:
    payments = [x for x in sandbox.store.newest_first("invoice_payment") if x["invoice"] == invoice["id"]]
    return list_envelope(payments, f"/v1/invoice_payments?invoice={invoice['id']}")


def retrieve_invoice_payment(call: Call) -> Obj:
    return call.sandbox.get("invoice_payment", call.path["id"])


def list_invoice_payments(call: Call) -> Obj:
    call.allow("invoice_payment.list")
    p = call.params
    items = call.sandbox.store.newest_first("invoice_payment")
    invoice = p.string("invoice")
    if invoice is not None:
        items = [i for i in items if i["invoice"] == invoice]
    payment = p.sub("payment")
    if payment is not None and payment.has("payment_intent"):
        payment_intent = payment.string("payment_intent")
        items = [i for i in items if i["payment"].get("payment_intent") == payment_intent]
    status = p.string("status")
    if status is not None:
        items = [i for i in items if i["status"] == status]
    return paginate(p, items, call.route_path, "invoice_payment")


# Charges, payment intents, payment methods, refunds, disputes ---------------------------------


def retrieve_charge(call: Call) -> Obj:
    return call.sandbox.get("charge", call.path["id"])


@includable("charge", "refunds")
def _charge_refunds(sandbox: Sandbox, charge: Obj) -> Obj:
    refunds = [r for r in sandbox.store.newest_first("refund") if r["charge"] == charge["id"]]
    return list_envelope(refunds, f"/v1/charges/{charge['id']}/refunds")


def list_charges(call: Call) -> Obj:
    call.allow("charge.list")
    p = call.params
    items = call.sandbox.store.newest_first("charge")
    for key in ("customer", "payment_intent"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i[key] == value]
    return paginate(p, created_filter(p, items), call.route_path, "charge")


def retrieve_payment_intent(call: Call) -> Obj:
    return call.sandbox.get("payment_intent", call.path["id"])


def list_payment_intents(call: Call) -> Obj:
    call.allow("payment_intent.list")
    p = call.params
    items = call.sandbox.store.newest_first("payment_intent")
    customer = p.string("customer")
    if customer is not None:
        items = [i for i in items if i["customer"] == customer]
    return paginate(p, created_filter(p, items), call.route_path, "payment_intent")


def retrieve_payment_method(call: Call) -> Obj:
    return call.sandbox.get("payment_method", call.path["id"])


def create_refund(call: Call) -> Obj:
    call.allow("refund.create")
    p, sandbox = call.params, call.sandbox
    charge_id = p.string("charge")
    payment_intent_id = p.string("payment_intent")
    if charge_id is None and payment_intent_id is None:
        raise invalid_request("One of `charge` or `payment_intent` is required.")
    if charge_id is None:
        assert payment_intent_id is not None
        payment_intent = sandbox.store.get("payment_intent", payment_intent_id)
        if payment_intent is None:
            raise resource_missing("payment_intent", payment_intent_id, param="payment_intent")
        if payment_intent["latest_charge"] is None:
            raise invalid_request(
                f"PaymentIntent {payment_intent_id} does not have a successful charge to refund."
            )
        charge_id = payment_intent["latest_charge"]
    charge = sandbox.store.get("charge", charge_id)
    if charge is None:
        raise resource_missing("charge", charge_id, param="charge")
    reason = p.enum("reason", ("duplicate", "fraudulent", "requested_by_customer"))
    return payments.refund_charge(sandbox, charge, p.integer("amount"), reason, p.metadata() or {})


def retrieve_refund(call: Call) -> Obj:
    return call.sandbox.get("refund", call.path["id"])


def list_refunds(call: Call) -> Obj:
    call.allow("refund.list")
    p = call.params
    items = call.sandbox.store.newest_first("refund")
    for key in ("charge", "payment_intent"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i[key] == value]
    return paginate(p, created_filter(p, items), call.route_path, "refund")


def retrieve_dispute(call: Call) -> Obj:
    return call.sandbox.get("dispute", call.path["id"])


def list_disputes(call: Call) -> Obj:
    call.allow("dispute.list")
    p = call.params
    items = call.sandbox.store.newest_first("dispute")
    for key in ("charge", "payment_intent"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i[key] == value]
    return paginate(p, created_filter(p, items), call.route_path, "dispute")


def create_preview(call: Call) -> Obj:
    """`invoices.create_preview` for a subscription: its next invoice, or what a change would bill."""
    p, sandbox = call.params, call.sandbox
    subscription_id = p.string("subscription")
    if subscription_id is None:
        raise invalid_request(
            "The sandbox previews subscription invoices only: pass `subscription`.", param="subscription"
        )
    subscription = sandbox.store.get("subscription", subscription_id)
    if subscription is None:
        raise resource_missing("subscription", subscription_id, param="subscription")
    customer_id = p.string("customer")
    if customer_id is not None and customer_id != subscription["customer"]:
        raise invalid_request("The subscription does not belong to this customer.", param="customer")
    with sandbox.on_clock(sandbox.clock_of(subscription["customer"])):
        details = p.sub("subscription_details")
        changes = None if details is None else details.sub_list("items")
        behavior, at = (
            _proration(p, sandbox, subscription, details)
            if details is not None
            else ("create_prorations", sandbox.now())
        )
        new_items = None if changes is None else plan_changes.planned_items(sandbox, subscription, changes)
        return billing.preview_invoice(sandbox, subscription, new_items, behavior, at)


def list_subscription_items(call: Call) -> Obj:
    subscription = call.sandbox.get("subscription", call.params.req_str("subscription"), param="subscription")
    return paginate(call.params, list(subscription["items"]["data"]), call.route_path, "subscription_item")


def retrieve_balance_transaction(call: Call) -> Obj:
    return call.sandbox.get("balance_transaction", call.path["id"])


def list_balance_transactions(call: Call) -> Obj:
    p = call.params
    items = call.sandbox.store.newest_first("balance_transaction")
    for key in ("source", "type", "currency"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i[key] == value]
    return paginate(p, created_filter(p, items), call.route_path, "balance_transaction")


def update_dispute(call: Call) -> Obj:
    p, sandbox = call.params, call.sandbox
    dispute = sandbox.get("dispute", call.path["id"])
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
    with sandbox.on_clock(sandbox.clock_of(dispute.get("customer"))):
        if metadata is not None:
            dispute["metadata"] = merge_metadata(
                dispute["metadata"], metadata, whole_cleared=p.raw("metadata") == ""
            )
        return payments.update_dispute(sandbox, dispute, evidence, bool(p.boolean("submit")))


def close_dispute(call: Call) -> Obj:
    return payments.close_dispute(call.sandbox, call.sandbox.get("dispute", call.path["id"]))
