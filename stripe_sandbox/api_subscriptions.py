"""Subscriptions without Checkout: create, pay invoices, and the customer's payment methods."""

from __future__ import annotations

from . import billing, payments
from .api import Call, Obj, paginate
from .cards import decline_of
from .checkout import resolve_line_item
from .errors import StripeError, invalid_request, parameter_missing, resource_missing
from .forms import Params
from .sandbox import Sandbox

DAY = 86400
MAX_TRIAL_DAYS = 730


def trial_end_of(sb: Sandbox, params: Params, *, now: int) -> int | None:
    """`trial_period_days` or `trial_end` (a timestamp, or `now` for no trial), validated as Stripe does."""
    days = params.integer("trial_period_days")
    end_raw = params.string("trial_end")
    if days is not None and end_raw is not None:
        raise invalid_request(
            "You may only specify one of these parameters: trial_end, trial_period_days.",
            param=params.param("trial_end"),
        )
    if days is not None:
        if days < 1 or days > MAX_TRIAL_DAYS:
            raise invalid_request(
                f"The trial period must be between 1 and {MAX_TRIAL_DAYS} days.",
                param=params.param("trial_period_days"),
            )
        return now + days * DAY
    if end_raw is None or end_raw == "now":
        return None
    end = params.integer("trial_end")
    assert end is not None
    if params.prefix and end < now + 48 * 3600:  # Checkout's `subscription_data` asks for two days
        raise invalid_request(
            "The `trial_end` date has to be at least 2 days in the future.", param=params.param("trial_end")
        )
    if end <= now:
        raise invalid_request(
            "Invalid timestamp: must be an integer Unix timestamp in the future.",
            param=params.param("trial_end"),
        )
    if end > now + MAX_TRIAL_DAYS * DAY:
        raise invalid_request(
            "The trial_end date cannot be more than 730 days in the future.", param=params.param("trial_end")
        )
    return end


def create_subscription(call: Call) -> Obj:
    p, sb = call.params, call.sb
    customer_id = p.req_str("customer")
    customer = sb.store.get("customer", customer_id)
    if customer is None or customer.get("deleted"):
        raise resource_missing("customer", customer_id, param="customer")
    with sb.on_clock(customer.get("test_clock")):
        return _create_subscription(call, customer)


def _create_subscription(call: Call, customer: Obj) -> Obj:
    p, sb = call.params, call.sb
    now = sb.now()
    items = p.sub_list("items")
    if not items:
        raise parameter_missing("items")
    resolved = [resolve_line_item(sb, item, default_quantity=1) for item in items]
    if any(not price["recurring"] for price, _ in resolved):
        raise invalid_request(
            "The price specified is set to `type=one_time` but this field only accepts prices with "
            "`type=recurring`.",
            param="items[0][price]",
        )
    if len({price["currency"] for price, _ in resolved}) > 1:
        raise invalid_request("All prices on a subscription must have the same currency.", param="items")
    behavior = p.enum(
        "payment_behavior",
        ("allow_incomplete", "default_incomplete", "error_if_incomplete", "pending_if_incomplete"),
    )
    if behavior == "pending_if_incomplete":
        raise invalid_request(
            "payment_behavior=pending_if_incomplete is not implemented by the sandbox.",
            param="payment_behavior",
        )
    trial_end = trial_end_of(sb, p, now=now)
    missing = "create_invoice"
    settings = p.sub("trial_settings")
    if settings is not None:
        end_behavior = settings.sub("end_behavior")
        if end_behavior is not None:
            missing = str(
                end_behavior.enum("missing_payment_method", ("cancel", "create_invoice", "pause"))
                or "create_invoice"
            )
    pm = None
    pm_id = p.string("default_payment_method")
    if pm_id is not None:
        pm = call.payment_method(pm_id, "default_payment_method")
        if pm["customer"] != customer["id"]:
            raise invalid_request(
                f"The customer does not have a payment method with the ID {pm_id}. The payment method must "
                "be attached to the customer.",
                param="default_payment_method",
            )
    first_amount = sum(price["unit_amount"] * (quantity or 0) for price, quantity in resolved)
    if (
        trial_end is None
        and first_amount > 0  # metered items alone owe nothing up front, so need no card yet
        and behavior not in ("default_incomplete",)
        and pm is None
        and customer["invoice_settings"]["default_payment_method"] is None
    ):
        raise invalid_request(
            "This customer has no attached payment source or default payment method. Please consider "
            "adding a default payment method.",
        )
    sub, _invoice = billing.start_subscription(
        sb,
        customer=customer,
        recurring_items=resolved,
        one_time_items=[],
        metadata=p.metadata() or {},
        pm=pm,
        trial_end=trial_end,
        payment_behavior=behavior or "allow_incomplete",
        description=p.string("description"),
        missing_payment_method=missing,
    )
    return sub


def pay_invoice(call: Call) -> Obj:
    sb = call.sb
    invoice = sb.get("invoice", call.path["id"])
    with sb.on_clock(sb.clock_of(invoice["customer"])):
        pm_id = call.params.string("payment_method")
        pm = None if pm_id is None else call.payment_method(pm_id, "payment_method")
        if pm is not None and pm["customer"] is None:
            payments.attach(sb, pm, invoice["customer"])
        return billing.pay_invoice(sb, invoice, pm)


MIN_AMOUNT = 50  # Stripe's smallest charge in USD cents; the sandbox applies it to every currency


def create_payment_intent(call: Call) -> Obj:
    p, sb = call.params, call.sb
    amount = p.integer("amount", required=True)
    assert amount is not None
    if amount < MIN_AMOUNT or amount > 99_999_999:
        raise invalid_request(
            "Amount must be at least 50 cents"
            if amount < MIN_AMOUNT
            else "Amount must be no more than 999,999.99",
            param="amount",
            code="amount_too_small" if amount < MIN_AMOUNT else "amount_too_large",
        )
    currency = p.req_str("currency").lower()
    customer_id = p.string("customer")
    if customer_id is not None:
        customer = sb.store.get("customer", customer_id)
        if customer is None or customer.get("deleted"):
            raise resource_missing("customer", customer_id, param="customer")
    types = p.str_list("payment_method_types")
    if types is not None and types != ["card"]:
        raise invalid_request(
            "The sandbox only implements payment_method_types=['card'].", param="payment_method_types"
        )
    automatic = p.sub("automatic_payment_methods")
    if automatic is not None:
        automatic.boolean("enabled")
        automatic.enum("allow_redirects", ("always", "never"))
    with sb.on_clock(sb.clock_of(customer_id)):
        pm_id = p.string("payment_method")
        pm = None if pm_id is None else call.payment_method(pm_id, "payment_method")
        if pm is not None and pm["customer"] is not None and pm["customer"] != customer_id:
            raise invalid_request(
                f"The provided PaymentMethod {pm['id']} belongs to another customer.", param="payment_method"
            )
        pi = payments.new_payment_intent(
            sb,
            amount=amount,
            currency=currency,
            customer_id=customer_id,
            pm=pm,
            description=p.string("description"),
            metadata=p.metadata() or {},
        )
        receipt_email = p.string("receipt_email")
        if receipt_email is not None:
            pi["receipt_email"] = receipt_email
        if p.boolean("confirm"):
            if pm is None:
                raise invalid_request(
                    "You cannot confirm this PaymentIntent because it's missing a payment method.",
                    param="payment_method",
                    code="payment_intent_unexpected_state",
                )
            _confirm(
                call, pi, pm, off_session=bool(p.boolean("off_session")), return_url=p.string("return_url")
            )
    return pi


def confirm_payment_intent(call: Call) -> Obj:
    p, sb = call.params, call.sb
    pi = sb.get("payment_intent", call.path["id"])
    if pi["status"] not in ("requires_payment_method", "requires_confirmation"):
        raise invalid_request(
            f"This PaymentIntent's status is {pi['status']}; it cannot be confirmed.",
            code="payment_intent_unexpected_state",
        )
    with sb.on_clock(sb.clock_of(pi["customer"])):
        pm_id = p.string("payment_method") or pi["payment_method"]
        if pm_id is None:
            raise invalid_request(
                "You cannot confirm this PaymentIntent because it's missing a payment method.",
                param="payment_method",
                code="payment_intent_unexpected_state",
            )
        pm = call.payment_method(pm_id, "payment_method")
        _confirm(call, pi, pm, off_session=bool(p.boolean("off_session")), return_url=p.string("return_url"))
    return pi


def _confirm(call: Call, pi: Obj, pm: Obj, *, off_session: bool, return_url: str | None) -> None:
    """Charge now, or ask for 3-D Secure; a decline answers 402 with the PaymentIntent, as Stripe's."""
    sb = call.sb
    card = sb.store.priv(pm["id"])["card"]
    decline = decline_of(card)
    if decline is None and payments.needs_authentication(sb, pm):
        if not off_session:
            payments.request_authentication(sb, pi, pm, return_url)
            return
        decline = billing.AUTHENTICATION_REQUIRED
    payments.confirm(sb, pi, pm, decline)
    if decline is not None:
        sb.save()  # the failed attempt is kept, as on Stripe, although the request answers 402
        raise StripeError(
            402,
            decline.message,
            type_="card_error",
            code=decline.code,
            decline_code=decline.decline_code,
            extra={"payment_intent": sb.snapshot(pi), "charge": pi["latest_charge"]},
        )


def list_customer_payment_methods(call: Call) -> Obj:
    sb = call.sb
    customer = sb.get("customer", call.path["id"])
    kind = call.params.string("type")
    items = [
        pm
        for pm in sb.store.newest_first("payment_method")
        if pm["customer"] == customer["id"] and (kind is None or pm["type"] == kind)
    ]
    return paginate(call.params, items, call.route_path, "payment_method")


def attach_payment_method(call: Call) -> Obj:
    sb = call.sb
    pm = call.payment_method(call.path["id"], "id")
    customer_id = call.params.req_str("customer")
    customer = sb.store.get("customer", customer_id)
    if customer is None or customer.get("deleted"):
        raise resource_missing("customer", customer_id, param="customer")
    return payments.attach(sb, pm, customer_id)


def detach_payment_method(call: Call) -> Obj:
    return payments.detach(call.sb, call.sb.get("payment_method", call.path["id"]))
