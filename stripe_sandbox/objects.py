"""Builders for catalog, customer, checkout, portal, event and webhook-endpoint objects.

Each builder returns a plain JSON-ready dict with exactly the top-level keys of Stripe's example
object in fixtures3.json (Stripe's own OpenAPI fixtures) for the pinned API version, so that
stripe-python deserialises them into the same classes and service code sees the same attributes.
Fields the sandbox does not model carry Stripe's "nothing configured" values (null, [], {}), never
the fixture's placeholder numbers.
"""

from __future__ import annotations

from typing import Any

from .config import API_VERSION

Obj = dict[str, Any]


def copy_tree(value: Any) -> Any:
    """A deep copy of a JSON tree (dicts, lists, scalars): what every stored object is.

    Faster than `copy.deepcopy`, which handles any object graph (docs/adr/0008-measured-choices.md);
    the sandbox copies an object for every response and every event.
    """
    if isinstance(value, dict):
        return {key: copy_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_tree(item) for item in value]
    return value


def empty_address() -> Obj:
    return {"city": None, "country": None, "line1": None, "line2": None, "postal_code": None, "state": None}


def list_envelope(data: list[Obj], url: str, *, has_more: bool = False) -> Obj:
    return {"object": "list", "data": data, "has_more": has_more, "url": url}


def product(
    *, id_: str, now: int, name: str, active: bool, description: str | None, metadata: dict[str, str]
) -> Obj:
    return {
        "id": id_,
        "object": "product",
        "active": active,
        "created": now,
        "default_price": None,
        "description": description,
        "images": [],
        "livemode": False,
        "marketing_features": [],
        "metadata": metadata,
        "name": name,
        "package_dimensions": None,
        "shippable": None,
        "statement_descriptor": None,
        "tax_code": None,
        "type": "service",
        "unit_label": None,
        "updated": now,
        "url": None,
    }


def price(
    *,
    id_: str,
    now: int,
    product_id: str,
    currency: str,
    unit_amount: int,
    recurring: Obj | None,
    lookup_key: str | None,
    nickname: str | None,
    active: bool,
    metadata: dict[str, str],
) -> Obj:
    return {
        "id": id_,
        "object": "price",
        "active": active,
        "billing_scheme": "per_unit",
        "created": now,
        "currency": currency,
        "custom_unit_amount": None,
        "livemode": False,
        "lookup_key": lookup_key,
        "metadata": metadata,
        "nickname": nickname,
        "product": product_id,
        "recurring": recurring,
        "tax_behavior": "unspecified",
        "tiers_mode": None,
        "transform_quantity": None,
        "type": "recurring" if recurring else "one_time",
        "unit_amount": unit_amount,
        "unit_amount_decimal": str(unit_amount),
    }


def recurring(interval: str, interval_count: int) -> Obj:
    return {
        "interval": interval,
        "interval_count": interval_count,
        "meter": None,
        "trial_period_days": None,
        "usage_type": "licensed",
    }


def is_metered(price: Obj) -> bool:
    """A price billed in arrears for what its meter counted (`recurring.usage_type=metered`)."""
    return bool(price["recurring"]) and price["recurring"].get("usage_type") == "metered"


def plan_from_price(price: Obj) -> Obj:
    """The legacy `plan` mirror that subscription items still carry next to `price`."""
    recurring_object = price["recurring"] or recurring("month", 1)
    return {
        "id": price["id"],
        "object": "plan",
        "active": price["active"],
        "amount": price["unit_amount"],
        "amount_decimal": price["unit_amount_decimal"],
        "billing_scheme": "per_unit",
        "created": price["created"],
        "currency": price["currency"],
        "interval": recurring_object["interval"],
        "interval_count": recurring_object["interval_count"],
        "livemode": False,
        "metadata": price["metadata"],
        "meter": recurring_object["meter"],
        "nickname": price["nickname"],
        "product": price["product"],
        "tiers_mode": None,
        "transform_usage": None,
        "trial_period_days": None,
        "usage_type": recurring_object["usage_type"],
    }


def customer(
    *,
    id_: str,
    now: int,
    email: str | None,
    name: str | None,
    phone: str | None,
    description: str | None,
    metadata: dict[str, str],
    invoice_prefix: str,
) -> Obj:
    return {
        "id": id_,
        "object": "customer",
        "address": None,
        "balance": 0,
        "created": now,
        "currency": None,
        "default_source": None,
        "delinquent": False,
        "description": description,
        "discount": None,
        "email": email,
        "invoice_prefix": invoice_prefix,
        "invoice_settings": customer_invoice_settings(),
        "livemode": False,
        "metadata": metadata,
        "name": name,
        "next_invoice_sequence": 1,
        "phone": phone,
        "preferred_locales": [],
        "shipping": None,
        "tax_exempt": "none",
        "test_clock": None,
    }


def customer_invoice_settings() -> Obj:
    return {"custom_fields": None, "default_payment_method": None, "footer": None, "rendering_options": None}


def test_clock(*, id_: str, now: int, frozen_time: int, name: str | None) -> Obj:
    return {
        "id": id_,
        "object": "test_helpers.test_clock",
        "created": now,
        "deletes_after": now + 30 * 86400,
        "frozen_time": frozen_time,
        "livemode": False,
        "name": name,
        "status": "ready",
        "status_details": {},
    }


def deleted(object_type: str, id_: str) -> Obj:
    return {"id": id_, "object": object_type, "deleted": True}


def checkout_session(
    *,
    id_: str,
    now: int,
    url: str,
    mode: str,
    customer_id: str | None,
    customer_email: str | None,
    client_reference_id: str | None,
    metadata: dict[str, str],
    success_url: str | None,
    cancel_url: str | None,
    expires_at: int,
    currency: str,
    amount_subtotal: int,
    customer_creation: str | None,
    locale: str | None,
) -> Obj:
    return {
        "id": id_,
        "object": "checkout.session",
        "adaptive_pricing": None,
        "after_expiration": None,
        "allow_promotion_codes": None,
        "amount_subtotal": amount_subtotal,
        "amount_total": amount_subtotal,
        "automatic_tax": {"enabled": False, "liability": None, "provider": None, "status": None},
        "billing_address_collection": None,
        "cancel_url": cancel_url,
        "client_reference_id": client_reference_id,
        "client_secret": None,
        "collected_information": None,
        "consent": None,
        "consent_collection": None,
        "created": now,
        "currency": currency,
        "currency_conversion": None,
        "custom_fields": [],
        "custom_text": {
            "after_submit": None,
            "shipping_address": None,
            "submit": None,
            "terms_of_service_acceptance": None,
        },
        "customer": customer_id,
        "customer_account": None,
        "customer_creation": customer_creation,
        "customer_details": None,
        "customer_email": customer_email,
        "discounts": [],
        "expires_at": expires_at,
        "integration_identifier": None,
        "invoice": None,
        "invoice_creation": None,
        "livemode": False,
        "locale": locale,
        "managed_payments": None,
        "metadata": metadata,
        "mode": mode,
        "origin_context": None,
        "payment_intent": None,
        "payment_link": None,
        "payment_method_collection": "always" if mode == "subscription" else None,
        "payment_method_configuration_details": None,
        "payment_method_options": {},
        "payment_method_types": ["card"],
        "payment_status": "unpaid",
        "permissions": None,
        "phone_number_collection": {"enabled": False},
        "recovered_from": None,
        "saved_payment_method_options": None,
        "setup_intent": None,
        "shipping_address_collection": None,
        "shipping_cost": None,
        "shipping_options": [],
        "status": "open",
        "submit_type": None,
        "subscription": None,
        "success_url": success_url,
        "total_details": {"amount_discount": 0, "amount_shipping": 0, "amount_tax": 0},
        "ui_mode": "hosted",
        "url": url,
        "wallet_options": None,
    }


def customer_details(email: str | None, name: str | None) -> Obj:
    return {
        "address": None,
        "business_name": None,
        "email": email,
        "individual_name": None,
        "name": name,
        "phone": None,
        "tax_exempt": "none",
        "tax_ids": [],
    }


def checkout_line_item(*, id_: str, price: Obj, product_name: str, quantity: int | None) -> Obj:
    """A session's line; a metered price has no quantity and costs nothing up front."""
    amount = price["unit_amount"] * (quantity or 0)
    return {
        "id": id_,
        "object": "item",
        "adjustable_quantity": None,
        "amount_discount": 0,
        "amount_subtotal": amount,
        "amount_tax": 0,
        "amount_total": amount,
        "currency": price["currency"],
        "description": product_name,
        "metadata": {},
        "price": price,
        "quantity": quantity,
    }


def portal_session(*, id_: str, now: int, customer_id: str, return_url: str | None, url: str) -> Obj:
    return {
        "id": id_,
        "object": "billing_portal.session",
        "configuration": "bpc_sandbox_default",
        "created": now,
        "customer": customer_id,
        "customer_account": None,
        "flow": None,
        "livemode": False,
        "locale": None,
        "on_behalf_of": None,
        "return_url": return_url,
        "url": url,
    }


def webhook_endpoint(
    *,
    id_: str,
    now: int,
    url: str,
    enabled_events: list[str],
    description: str | None,
    metadata: dict[str, str],
    api_version: str | None,
) -> Obj:
    return {
        "id": id_,
        "object": "webhook_endpoint",
        "api_version": api_version,
        "application": None,
        "created": now,
        "description": description,
        "enabled_events": enabled_events,
        "livemode": False,
        "metadata": metadata,
        "status": "enabled",
        "url": url,
    }


def event(
    *,
    id_: str,
    now: int,
    type_: str,
    data_object: Obj,
    previous_attributes: Obj | None,
    pending_webhooks: int,
    request_id: str | None,
    idempotency_key: str | None,
) -> Obj:
    data: Obj = {"object": data_object}
    if previous_attributes is not None:
        data["previous_attributes"] = previous_attributes
    return {
        "id": id_,
        "object": "event",
        "api_version": API_VERSION,
        "created": now,
        "data": data,
        "livemode": False,
        "pending_webhooks": pending_webhooks,
        "request": {"id": request_id, "idempotency_key": idempotency_key},
        "type": type_,
    }
