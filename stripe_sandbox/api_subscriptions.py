"""Subscriptions without Checkout: create, pay invoices, and the customer's payment methods."""

from __future__ import annotations

from . import billing, payments
from .api import Call, Obj, paginate
from .cards import decline_of
from .catalog import trial_end_of
from .checkout import resolve_line_item
from .errors import StripeError, invalid_request, parameter_missing, resource_missing


def create_subscription(call: Call) -> Obj:
    params, sandbox = call.params, call.sandbox
    customer_id = params.req_str("customer")
    customer = sandbox.store.get("customer", customer_id)
    if customer is None or customer.get("deleted"):
        raise resource_missing("customer", customer_id, param="customer")
    with sandbox.on_clock(customer.get("test_clock")):
        return _create_subscription(call, customer)


def _create_subscription(call: Call, customer: Obj) -> Obj:
    params, sandbox = call.params, call.sandbox
    now = sandbox.now()
    items = params.sub_list("items")
    if not items:
        raise parameter_missing("items")
    resolved = [resolve_line_item(sandbox, item, default_quantity=1) for item in items]
    if any(not price["recurring"] for price, _ in resolved):
        raise invalid_request(
            "The price specified is set to `type=one_time` but this field only accepts prices with "
            "`type=recurring`.",
            param="items[0][price]",
        )
    if len({price["currency"] for price, _ in resolved}) > 1:
        raise invalid_request("All prices on a subscription must have the same currency.", param="items")
    behavior = params.enum(
        "payment_behavior",
        ("allow_incomplete", "default_incomplete", "error_if_incomplete", "pending_if_incomplete"),
    )
    if behavior == "pending_if_incomplete":
        raise invalid_request(
            "payment_behavior=pending_if_incomplete is not implemented by the sandbox.",
            param="payment_behavior",
        )
    trial_end = trial_end_of(sandbox, params, now=now)
    missing = "create_invoice"
    settings = params.sub("trial_settings")
    if settings is not None:
        end_behavior = settings.sub("end_behavior")
        if end_behavior is not None:
            missing = str(
                end_behavior.enum("missing_payment_method", ("cancel", "create_invoice", "pause"))
                or "create_invoice"
            )
    payment_method = None
    payment_method_id = params.string("default_payment_method")
    if payment_method_id is not None:
        payment_method = call.payment_method(payment_method_id, "default_payment_method")
        if payment_method["customer"] != customer["id"]:
            raise invalid_request(
                f"The customer does not have a payment method with "
                f"the ID {payment_method_id}. The payment method must "
                "be attached to the customer.",
                param="default_payment_method",
            )
    first_amount = sum(price["unit_amount"] * (quantity or 0) for price, quantity in resolved)
    if (
        trial_end is None
        and first_amount > 0  # metered items alone owe nothing up front, so need no card yet
        and behavior not in ("default_incomplete",)
        and payment_method is None
        and customer["invoice_settings"]["default_payment_method"] is None
    ):
        raise invalid_request(
            "This customer has no attached payment source or default payment method. Please consider "
            "adding a default payment method.",
        )
    subscription, _invoice = billing.start_subscription(
        sandbox,
        customer=customer,
        recurring_items=resolved,
        one_time_items=[],
        metadata=params.metadata() or {},
        payment_method=payment_method,
        trial_end=trial_end,
        payment_behavior=behavior or "allow_incomplete",
        description=params.string("description"),
        missing_payment_method=missing,
    )
    return subscription


def pay_invoice(call: Call) -> Obj:
    sandbox = call.sandbox
    invoice = sandbox.get("invoice", call.path["id"])
    with sandbox.on_clock(sandbox.clock_of(invoice["customer"])):
        payment_method_id = call.params.string("payment_method")
        payment_method = (
            None if payment_method_id is None else call.payment_method(payment_method_id, "payment_method")
        )
        if payment_method is not None and payment_method["customer"] is None:
            payments.attach(sandbox, payment_method, invoice["customer"])
        return billing.pay_invoice(sandbox, invoice, payment_method)


MIN_AMOUNT = 50  # Stripe's smallest charge in USD cents; the sandbox applies it to every currency


def create_payment_intent(call: Call) -> Obj:
    params, sandbox = call.params, call.sandbox
    amount = params.integer("amount", required=True)
    assert amount is not None
    if amount < MIN_AMOUNT or amount > 99_999_999:
        raise invalid_request(
            "Amount must be at least 50 cents"
            if amount < MIN_AMOUNT
            else "Amount must be no more than 999,999.99",
            param="amount",
            code="amount_too_small" if amount < MIN_AMOUNT else "amount_too_large",
        )
    currency = params.req_str("currency").lower()
    customer_id = params.string("customer")
    if customer_id is not None:
        customer = sandbox.store.get("customer", customer_id)
        if customer is None or customer.get("deleted"):
            raise resource_missing("customer", customer_id, param="customer")
    types = params.str_list("payment_method_types")
    if types is not None and types != ["card"]:
        raise invalid_request(
            "The sandbox only implements payment_method_types=['card'].", param="payment_method_types"
        )
    automatic = params.sub("automatic_payment_methods")
    if automatic is not None:
        automatic.boolean("enabled")
        automatic.enum("allow_redirects", ("always", "never"))
    with sandbox.on_clock(sandbox.clock_of(customer_id)):
        payment_method_id = params.string("payment_method")
        payment_method = (
            None if payment_method_id is None else call.payment_method(payment_method_id, "payment_method")
        )
        if (
            payment_method is not None
            and payment_method["customer"] is not None
            and payment_method["customer"] != customer_id
        ):
            raise invalid_request(
                f"The provided PaymentMethod {payment_method['id']} belongs to another customer.",
                param="payment_method",
            )
        payment_intent = payments.new_payment_intent(
            sandbox,
            amount=amount,
            currency=currency,
            customer_id=customer_id,
            payment_method=payment_method,
            description=params.string("description"),
            metadata=params.metadata() or {},
        )
        receipt_email = params.string("receipt_email")
        if receipt_email is not None:
            payment_intent["receipt_email"] = receipt_email
        if params.boolean("confirm"):
            if payment_method is None:
                raise invalid_request(
                    "You cannot confirm this PaymentIntent because it's missing a payment method.",
                    param="payment_method",
                    code="payment_intent_unexpected_state",
                )
            _confirm(
                call,
                payment_intent,
                payment_method,
                off_session=bool(params.boolean("off_session")),
                return_url=params.string("return_url"),
            )
    return payment_intent


def confirm_payment_intent(call: Call) -> Obj:
    params, sandbox = call.params, call.sandbox
    payment_intent = sandbox.get("payment_intent", call.path["id"])
    if payment_intent["status"] not in ("requires_payment_method", "requires_confirmation"):
        raise invalid_request(
            f"This PaymentIntent's status is {payment_intent['status']}; it cannot be confirmed.",
            code="payment_intent_unexpected_state",
        )
    with sandbox.on_clock(sandbox.clock_of(payment_intent["customer"])):
        payment_method_id = params.string("payment_method") or payment_intent["payment_method"]
        if payment_method_id is None:
            raise invalid_request(
                "You cannot confirm this PaymentIntent because it's missing a payment method.",
                param="payment_method",
                code="payment_intent_unexpected_state",
            )
        payment_method = call.payment_method(payment_method_id, "payment_method")
        _confirm(
            call,
            payment_intent,
            payment_method,
            off_session=bool(params.boolean("off_session")),
            return_url=params.string("return_url"),
        )
    return payment_intent


def _confirm(
    call: Call, payment_intent: Obj, payment_method: Obj, *, off_session: bool, return_url: str | None
) -> None:
    """Charge now, or ask for 3-D Secure; a decline answers 402 with the PaymentIntent, as Stripe's."""
    sandbox = call.sandbox
    card = sandbox.store.priv(payment_method["id"])["card"]
    decline = decline_of(card)
    if decline is None and payments.needs_authentication(sandbox, payment_method):
        if not off_session:
            payments.request_authentication(sandbox, payment_intent, payment_method, return_url)
            return
        decline = billing.AUTHENTICATION_REQUIRED
    payments.confirm(sandbox, payment_intent, payment_method, decline)
    if decline is not None:
        sandbox.save()  # the failed attempt is kept, as on Stripe, although the request answers 402
        raise StripeError(
            402,
            decline.message,
            type_="card_error",
            code=decline.code,
            decline_code=decline.decline_code,
            extra={
                "payment_intent": sandbox.snapshot(payment_intent),
                "charge": payment_intent["latest_charge"],
            },
        )


def list_customer_payment_methods(call: Call) -> Obj:
    sandbox = call.sandbox
    customer = sandbox.get("customer", call.path["id"])
    kind = call.params.string("type")
    items = [
        payment_method
        for payment_method in sandbox.store.newest_first("payment_method")
        if payment_method["customer"] == customer["id"] and (kind is None or payment_method["type"] == kind)
    ]
    return paginate(call.params, items, call.route_path, "payment_method")


def attach_payment_method(call: Call) -> Obj:
    sandbox = call.sandbox
    payment_method = call.payment_method(call.path["id"], "id")
    customer_id = call.params.req_str("customer")
    customer = sandbox.store.get("customer", customer_id)
    if customer is None or customer.get("deleted"):
        raise resource_missing("customer", customer_id, param="customer")
    return payments.attach(sandbox, payment_method, customer_id)


def detach_payment_method(call: Call) -> Obj:
    return payments.detach(call.sandbox, call.sandbox.get("payment_method", call.path["id"]))
