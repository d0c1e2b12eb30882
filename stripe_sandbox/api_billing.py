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
    params, sandbox = call.params, call.sandbox
    subscription = sandbox.get("subscription", call.path["id"])
    still_allowed = {"metadata", "cancellation_details", "expand"}
    if subscription["status"] == "canceled" and set(params.tree) - still_allowed:
        raise invalid_request(
            "A canceled subscription can only update its cancellation_details and metadata."
        )
    with sandbox.on_clock(sandbox.clock_of(subscription["customer"])):
        return _update_subscription(call, subscription)


def _proration(
    params: Params, sandbox: Sandbox, subscription: Obj, prefix_params: Params | None = None
) -> tuple[str, int]:
    """`proration_behavior` and `proration_date` (default: now), validated."""
    source = prefix_params or params
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
    params, sandbox = call.params, call.sandbox
    before = sandbox.snapshot(subscription)
    now = sandbox.now()
    changes = params.sub_list("items")
    if changes is not None or params.has("proration_behavior") or params.has("proration_date"):
        if subscription["status"] not in ("active", "trialing", "past_due"):
            raise invalid_request(
                f"A subscription with status {subscription['status']} cannot change its items."
            )
        behavior, at = _proration(params, sandbox, subscription)
        new_items = plan_changes.planned_items(sandbox, subscription, changes or [])
    if params.has("cancel_at") and params.raw("cancel_at") != "":
        wanted_cancel = params.integer("cancel_at")
        if wanted_cancel is not None and wanted_cancel <= now:
            raise invalid_request("cancel_at must be in the future.", param="cancel_at")
    payment_method_id = (
        params.string("default_payment_method", allow_empty=True)
        if params.has("default_payment_method")
        else None
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
    if params.has("default_payment_method"):
        subscription["default_payment_method"] = None if payment_method is None else payment_method["id"]
    if changes is not None:
        billing.change_items(sandbox, subscription, new_items, behavior, at)
    period_end = subscription["items"]["data"][0]["current_period_end"]
    if params.has("cancel_at_period_end"):
        billing.schedule_cancel(sandbox, subscription, bool(params.boolean("cancel_at_period_end")))
    if params.has("cancel_at"):
        cancel_at = params.integer("cancel_at") if params.raw("cancel_at") != "" else None
        if cancel_at is not None and cancel_at <= now:
            raise invalid_request("cancel_at must be in the future.", param="cancel_at")
        subscription["cancel_at"] = cancel_at
        subscription["cancel_at_period_end"] = cancel_at is not None and cancel_at == period_end
        subscription["canceled_at"] = now if cancel_at is not None else None
        subscription["cancellation_details"]["reason"] = (
            "cancellation_requested" if cancel_at is not None else None
        )
    details = params.sub("cancellation_details")
    if details is not None:
        for key in ("comment", "feedback"):
            if details.has(key):
                subscription["cancellation_details"][key] = details.string(key, allow_empty=True) or None
    if params.has("description"):
        subscription["description"] = params.string("description", allow_empty=True) or None
    subscription["metadata"] = merge_metadata(
        subscription["metadata"], params.metadata(), whole_cleared=params.raw("metadata") == ""
    )
    sandbox.emit_updated("customer.subscription.updated", before, subscription)
    return subscription


def cancel_subscription(call: Call) -> Obj:
    call.allow("subscription.cancel")
    params, sandbox = call.params, call.sandbox
    subscription = sandbox.get("subscription", call.path["id"])
    if subscription["status"] == "canceled":
        raise invalid_request(
            f"A canceled subscription can only update its cancellation_details and metadata. "
            f"Subscription {subscription['id']} is already canceled."
        )
    details = params.sub("cancellation_details")
    if details is not None:
        for key in ("comment", "feedback"):
            if details.has(key):
                subscription["cancellation_details"][key] = details.string(key, allow_empty=True) or None
    subscription["canceled_at"] = sandbox.now()
    billing.cancel_now(sandbox, subscription, ended_at=sandbox.now(), reason="cancellation_requested")
    return subscription


def list_subscriptions(call: Call) -> Obj:
    call.allow("subscription.list")
    params = call.params
    items = call.sandbox.store.newest_first("subscription")
    status = params.enum(
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
        items = [entry for entry in items if entry["status"] != "canceled"]
    elif status == "ended":
        items = [entry for entry in items if entry["status"] in ("canceled", "incomplete_expired")]
    elif status != "all":
        items = [entry for entry in items if entry["status"] == status]
    customer = params.string("customer")
    if customer is not None:
        items = [entry for entry in items if entry["customer"] == customer]
    price = params.string("price")
    if price is not None:
        items = [
            entry for entry in items if any(item["price"]["id"] == price for item in entry["items"]["data"])
        ]
    return paginate(params, created_filter(params, items), call.route_path, "subscription")


def search_subscriptions(call: Call) -> Obj:
    return search(call, "subscription", "subscription.search", ("status", "customer"))


# Invoices ---------------------------------------------------------------------------------------


def retrieve_invoice(call: Call) -> Obj:
    return call.sandbox.get("invoice", call.path["id"])


def list_invoices(call: Call) -> Obj:
    call.allow("invoice.list")
    params = call.params
    items = call.sandbox.store.newest_first("invoice")
    for key in ("customer", "status", "collection_method"):
        value = params.string(key)
        if value is not None:
            items = [entry for entry in items if entry[key] == value]
    subscription = params.string("subscription")
    if subscription is not None:
        items = [entry for entry in items if billing.subscription_of(entry) == subscription]
    return paginate(params, created_filter(params, items), call.route_path, "invoice")


def list_invoice_lines(call: Call) -> Obj:
    invoice = call.sandbox.get("invoice", call.path["id"])
    return paginate(call.params, list(invoice["lines"]["data"]), call.route_path, "line_item")


@includable("invoice", "payments")
def _invoice_payments(sandbox: Sandbox, invoice: Obj) -> Obj:
    payments = [
        payment
        for payment in sandbox.store.newest_first("invoice_payment")
        if payment["invoice"] == invoice["id"]
    ]
    return list_envelope(payments, f"/v1/invoice_payments?invoice={invoice['id']}")


def retrieve_invoice_payment(call: Call) -> Obj:
    return call.sandbox.get("invoice_payment", call.path["id"])


def list_invoice_payments(call: Call) -> Obj:
    call.allow("invoice_payment.list")
    params = call.params
    items = call.sandbox.store.newest_first("invoice_payment")
    invoice = params.string("invoice")
    if invoice is not None:
        items = [entry for entry in items if entry["invoice"] == invoice]
    payment = params.sub("payment")
    if payment is not None and payment.has("payment_intent"):
        payment_intent = payment.string("payment_intent")
        items = [entry for entry in items if entry["payment"].get("payment_intent") == payment_intent]
    status = params.string("status")
    if status is not None:
        items = [entry for entry in items if entry["status"] == status]
    return paginate(params, items, call.route_path, "invoice_payment")


# Charges, payment intents, payment methods, refunds, disputes ---------------------------------


def retrieve_charge(call: Call) -> Obj:
    return call.sandbox.get("charge", call.path["id"])


@includable("charge", "refunds")
def _charge_refunds(sandbox: Sandbox, charge: Obj) -> Obj:
    refunds = [refund for refund in sandbox.store.newest_first("refund") if refund["charge"] == charge["id"]]
    return list_envelope(refunds, f"/v1/charges/{charge['id']}/refunds")


def list_charges(call: Call) -> Obj:
    call.allow("charge.list")
    params = call.params
    items = call.sandbox.store.newest_first("charge")
    for key in ("customer", "payment_intent"):
        value = params.string(key)
        if value is not None:
            items = [entry for entry in items if entry[key] == value]
    return paginate(params, created_filter(params, items), call.route_path, "charge")


def retrieve_payment_intent(call: Call) -> Obj:
    return call.sandbox.get("payment_intent", call.path["id"])


def list_payment_intents(call: Call) -> Obj:
    call.allow("payment_intent.list")
    params = call.params
    items = call.sandbox.store.newest_first("payment_intent")
    customer = params.string("customer")
    if customer is not None:
        items = [entry for entry in items if entry["customer"] == customer]
    return paginate(params, created_filter(params, items), call.route_path, "payment_intent")


def retrieve_payment_method(call: Call) -> Obj:
    return call.sandbox.get("payment_method", call.path["id"])


def create_refund(call: Call) -> Obj:
    call.allow("refund.create")
    params, sandbox = call.params, call.sandbox
    charge_id = params.string("charge")
    payment_intent_id = params.string("payment_intent")
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
    reason = params.enum("reason", ("duplicate", "fraudulent", "requested_by_customer"))
    return payments.refund_charge(sandbox, charge, params.integer("amount"), reason, params.metadata() or {})


def retrieve_refund(call: Call) -> Obj:
    return call.sandbox.get("refund", call.path["id"])


def list_refunds(call: Call) -> Obj:
    call.allow("refund.list")
    params = call.params
    items = call.sandbox.store.newest_first("refund")
    for key in ("charge", "payment_intent"):
        value = params.string(key)
        if value is not None:
            items = [entry for entry in items if entry[key] == value]
    return paginate(params, created_filter(params, items), call.route_path, "refund")


def retrieve_dispute(call: Call) -> Obj:
    return call.sandbox.get("dispute", call.path["id"])


def list_disputes(call: Call) -> Obj:
    call.allow("dispute.list")
    params = call.params
    items = call.sandbox.store.newest_first("dispute")
    for key in ("charge", "payment_intent"):
        value = params.string(key)
        if value is not None:
            items = [entry for entry in items if entry[key] == value]
    return paginate(params, created_filter(params, items), call.route_path, "dispute")


def create_preview(call: Call) -> Obj:
    """`invoices.create_preview` for a subscription: its next invoice, or what a change would bill."""
    params, sandbox = call.params, call.sandbox
    subscription_id = params.string("subscription")
    if subscription_id is None:
        raise invalid_request(
            "The sandbox previews subscription invoices only: pass `subscription`.", param="subscription"
        )
    subscription = sandbox.store.get("subscription", subscription_id)
    if subscription is None:
        raise resource_missing("subscription", subscription_id, param="subscription")
    customer_id = params.string("customer")
    if customer_id is not None and customer_id != subscription["customer"]:
        raise invalid_request("The subscription does not belong to this customer.", param="customer")
    with sandbox.on_clock(sandbox.clock_of(subscription["customer"])):
        details = params.sub("subscription_details")
        changes = None if details is None else details.sub_list("items")
        behavior, at = (
            _proration(params, sandbox, subscription, details)
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
    params = call.params
    items = call.sandbox.store.newest_first("balance_transaction")
    for key in ("source", "type", "currency"):
        value = params.string(key)
        if value is not None:
            items = [entry for entry in items if entry[key] == value]
    return paginate(params, created_filter(params, items), call.route_path, "balance_transaction")


def update_dispute(call: Call) -> Obj:
    params, sandbox = call.params, call.sandbox
    dispute = sandbox.get("dispute", call.path["id"])
    evidence: dict[str, str] = {}
    given = params.sub("evidence")
    if given is not None:
        for key in payments.DISPUTE_EVIDENCE:
            if given.has(key):
                text = given.string(key, allow_empty=True) or ""
                if len(text) > 20_000:
                    raise invalid_request(
                        "Evidence text can have up to 20000 characters.", param=given.param(key)
                    )
                evidence[key] = text
    metadata = params.metadata()
    with sandbox.on_clock(sandbox.clock_of(dispute.get("customer"))):
        if metadata is not None:
            dispute["metadata"] = merge_metadata(
                dispute["metadata"], metadata, whole_cleared=params.raw("metadata") == ""
            )
        # Stripe submits evidence unless told `submit=false`.
        submit = params.boolean("submit") is not False
        return payments.update_dispute(sandbox, dispute, evidence, submit)


def close_dispute(call: Call) -> Obj:
    return payments.close_dispute(call.sandbox, call.sandbox.get("dispute", call.path["id"]))
