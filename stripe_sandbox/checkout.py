"""Checkout Sessions: creation rules, payment from the hosted page, expiry.

Validation mirrors what Stripe rejects for the parameters the service uses (mode and price kinds,
`customer` vs `customer_email`, the `expires_at` window), with Stripe's messages and `param`
names, so a mistake in service code surfaces here as it would in test mode.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlsplit

from . import billing, objects, payments
from .cards import Decline, check_card, decline_of
from .catalog import new_customer, price_from_params, trial_end_of
from .errors import StripeError, invalid_request, parameter_missing, resource_missing
from .forms import Params
from .ids import new_id
from .sandbox import Sandbox

Obj = dict[str, Any]


def valid_url(value: str) -> bool:
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def url_param(params: Params, key: str) -> str | None:
    value = params.string(key)
    if value is not None and not valid_url(value):
        raise StripeError(400, "Not a valid URL", code="url_invalid", param=params.param(key))
    return value


def resolve_line_item(
    sandbox: Sandbox, item: Params, *, default_quantity: int | None = None
) -> tuple[Obj, int | None]:
    """The price and quantity of one line; None for a metered price, which must not have one."""
    quantity = item.integer("quantity")
    if quantity is None:
        quantity = default_quantity
    price_id = item.string("price")
    price_data = item.sub("price_data")
    if price_id is None and price_data is None:
        raise parameter_missing(item.param("price"))
    if price_id is not None:
        price = sandbox.store.get("price", price_id)
        if price is None:
            raise resource_missing("price", price_id, param=item.param("price"))
        if not price["active"]:
            raise invalid_request(
                "The price specified is inactive. This field only accepts active prices.",
                param=item.param("price"),
            )
    else:
        assert price_data is not None
        price = price_from_params(sandbox, price_data, inline=True)
    if objects.is_metered(price):
        if item.has("quantity"):
            raise invalid_request(
                "You cannot set the quantity for metered plans."
                if item.prefix.startswith("items")  # subscriptions.create words it this way
                else "Quantity should not be specified where usage_type is `metered`. Remove quantity from "
                f"`{item.prefix}`",
                param=item.param("quantity"),
            )
        return price, None
    if quantity is None:
        raise parameter_missing(item.param("quantity"))
    if quantity < 1:
        raise invalid_request("This value must be greater than or equal to 1.", param=item.param("quantity"))
    return price, quantity


def create_session(sandbox: Sandbox, params: Params) -> Obj:
    now = sandbox.now()
    mode = params.enum("mode", ("payment", "subscription", "setup"), required=True)
    if mode == "setup":
        raise invalid_request("The Stripe sandbox does not implement `mode=setup`.", param="mode")
    ui_mode = params.string("ui_mode")
    if ui_mode not in (None, "hosted", "hosted_page"):
        raise invalid_request(
            f"The Stripe sandbox only implements hosted Checkout, not ui_mode={ui_mode}.", param="ui_mode"
        )
    success_url = url_param(params, "success_url")
    cancel_url = url_param(params, "cancel_url")
    customer_id = params.string("customer")
    customer_email = params.string("customer_email")
    if customer_id is not None and customer_email is not None:
        raise invalid_request(
            "You may only specify one of these parameters: customer, customer_email.", param="customer_email"
        )
    if customer_id is not None:
        customer = sandbox.store.get("customer", customer_id)
        if customer is None or customer.get("deleted"):
            raise resource_missing("customer", customer_id, param="customer")
    items = params.sub_list("line_items")
    if not items:
        raise parameter_missing("line_items")
    resolved = [resolve_line_item(sandbox, item) for item in items]
    currencies = {price["currency"] for price, _ in resolved}
    if len(currencies) > 1:
        raise invalid_request("All prices must be in the same currency.", param="line_items")
    recurring = [(price, quantity) for price, quantity in resolved if price["recurring"]]
    if mode == "subscription" and not recurring:
        raise invalid_request(
            "You must provide at least one recurring price in `subscription` mode when using prices.",
            param="line_items",
        )
    if mode == "payment" and recurring:
        raise invalid_request(
            "You specified `payment` mode but passed a recurring price. Either switch to `subscription` mode "
            "or use only one-time prices.",
            param="line_items",
        )
    expires_at = params.integer("expires_at")
    if expires_at is None:
        expires_at = now + sandbox.config.checkout_session_ttl
    elif expires_at < now + 30 * 60:
        raise invalid_request(
            "The `expires_at` timestamp must be at least 30 minutes from Checkout Session creation.",
            param="expires_at",
        )
    elif expires_at > now + 24 * 3600:
        raise invalid_request(
            "The `expires_at` timestamp must be less than 24 hours from Checkout Session creation.",
            param="expires_at",
        )
    sub_data = params.sub("subscription_data")
    sub_metadata: dict[str, str] = {}
    trial_days: int | None = None
    trial_end: int | None = None
    if sub_data is not None:
        if mode != "subscription":
            raise invalid_request(
                "You can not pass `subscription_data` in `payment` mode.", param="subscription_data"
            )
        trial_end_of(sandbox, sub_data, now=now)  # validated now, counted from payment
        trial_days = sub_data.integer("trial_period_days")
        trial_end = sub_data.integer("trial_end")
        sub_metadata = sub_data.metadata() or {}
    pi_data = params.sub("payment_intent_data")
    pi_metadata = (pi_data.metadata() if pi_data is not None else None) or {}
    customer_creation = params.enum("customer_creation", ("always", "if_required"))
    if customer_creation is not None and mode != "payment":
        raise invalid_request(
            "`customer_creation` can only be used in `payment` mode.", param="customer_creation"
        )
    session_id = new_id("cs_test")
    session = objects.checkout_session(
        id_=session_id,
        now=now,
        url=f"{sandbox.config.public_base_url.rstrip('/')}/c/pay/{session_id}",
        mode=str(mode),
        customer_id=customer_id,
        customer_email=customer_email,
        client_reference_id=params.string("client_reference_id"),
        metadata=params.metadata() or {},
        success_url=success_url,
        cancel_url=cancel_url,
        expires_at=expires_at,
        currency=resolved[0][0]["currency"],
        amount_subtotal=sum(price["unit_amount"] * (quantity or 0) for price, quantity in resolved),
        customer_creation=customer_creation or ("if_required" if mode == "payment" else None),
        locale=params.string("locale"),
    )
    sandbox.store.put(session)
    sandbox.store.priv(session_id).update(
        line_items=[
            {"id": new_id("li"), "price": price["id"], "quantity": quantity} for price, quantity in resolved
        ],
        subscription_metadata=sub_metadata,
        trial_days=trial_days,
        trial_end=trial_end,
        payment_intent_metadata=pi_metadata,
    )
    return session


def line_items(sandbox: Sandbox, session: Obj) -> list[Obj]:
    result = []
    for entry in sandbox.store.priv(session["id"])["line_items"]:
        price = sandbox.get("price", entry["price"])
        product = sandbox.store.get("product", price["product"])
        name = product["name"] if product else price["product"]
        result.append(
            objects.checkout_line_item(
                id_=entry["id"], price=sandbox.snapshot(price), product_name=name, quantity=entry["quantity"]
            )
        )
    return result


def expire_session(sandbox: Sandbox, session: Obj) -> Obj:
    if session["status"] != "open":
        raise invalid_request(
            f'Only Checkout Sessions with a status in ["open"] can be expired. This session has a status '
            f'of "{session["status"]}".',
            param="session",
        )
    session.update(status="expired", url=None)
    sandbox.emit("checkout.session.expired", session)
    return session


def pay_session(
    sandbox: Sandbox, session: Obj, *, email: str, name: str, number: str, expiry: str, cvc: str
) -> Obj:
    """What pressing "Subscribe"/"Pay" does. Raises `Decline` with a customer-facing message."""
    with sandbox.on_clock(sandbox.clock_of(session["customer"])):
        return _pay_session(sandbox, session, email=email, name=name, number=number, expiry=expiry, cvc=cvc)


def _pay_session(
    sandbox: Sandbox, session: Obj, *, email: str, name: str, number: str, expiry: str, cvc: str
) -> Obj:
    if session["status"] != "open":
        raise Decline("session_inactive", None, "This Checkout Session is no longer active.")
    today = sandbox.now()
    moment = dt.datetime.fromtimestamp(today, dt.UTC)
    if not email or "@" not in email:
        raise Decline("email_invalid", None, "Your email address is invalid.", "email")
    if not name.strip():
        raise Decline("name_missing", None, "Your name is incomplete.", "billingName")
    card = check_card(number, expiry, cvc, moment.year, moment.month)
    decline = decline_of(card)
    if decline is not None:
        raise decline  # declined before anything is created: Stripe shows the error, nothing else changes
    customer = sandbox.store.get("customer", session["customer"] or "")
    private = sandbox.store.priv(session["id"])
    if customer is None and (session["mode"] == "subscription" or session["customer_creation"] == "always"):
        customer = new_customer(sandbox, email=email, name=name, phone=None, description=None, metadata={})
    payment_method = payments.create_payment_method(
        sandbox, card, customer["id"] if customer else None, email, name
    )
    # Paying happens after the hosted page's 3-D Secure challenge (or the test helper's
    # `three_d_secure=complete`), so a card that asks for it is authenticated by now.
    sandbox.store.priv(payment_method["id"])["authenticated"] = True
    if customer is not None:
        sandbox.emit("payment_method.attached", payment_method)
    before = sandbox.snapshot(session)
    items = [(sandbox.get("price", entry["price"]), entry["quantity"]) for entry in private["line_items"]]
    if session["mode"] == "subscription":
        assert customer is not None
        trial_days = private.get("trial_days")
        trial_end = private.get("trial_end")
        if trial_days is not None:
            trial_end = today + int(trial_days) * 86400
        subscription, invoice = billing.start_subscription(
            sandbox,
            customer=customer,
            recurring_items=[(price, quantity) for price, quantity in items if price["recurring"]],
            one_time_items=[(price, int(quantity)) for price, quantity in items if not price["recurring"]],
            metadata=dict(private["subscription_metadata"]),
            payment_method=payment_method,
            trial_end=trial_end,
        )
        session.update(subscription=subscription["id"], invoice=invoice["id"])
    else:
        payment_intent, _charge = payments.charge_card(
            sandbox,
            amount=session["amount_total"],
            currency=session["currency"],
            customer_id=customer["id"] if customer else None,
            payment_method=payment_method,
            description=None,
            decline=None,
            metadata=dict(private["payment_intent_metadata"]),
        )
        session["payment_intent"] = payment_intent["id"]
    session.update(
        status="complete",
        payment_status="paid",
        url=None,
        customer=customer["id"] if customer else None,
        customer_details=objects.customer_details(email, name),
    )
    del before
    sandbox.emit("checkout.session.completed", session)
    return session


def success_redirect(session: Obj) -> str | None:
    url = session["success_url"]
    if url is None:
        return None
    return str(url).replace("{CHECKOUT_SESSION_ID}", session["id"])
