"""Which request parameters the sandbox implements, per route, down to nested keys.

Stripe accepts far more parameters than the sandbox models. A parameter the sandbox would read
and throw away makes a vendor's test pass here and fail on Stripe, so every parameter of a request
is checked against this table before the handler runs: one Stripe does not know answers Stripe's
"Received unknown parameter", one Stripe knows but the sandbox does not model answers 400 "not
implemented by the sandbox", and nothing has changed either way.

Patterns are dotted paths: `#` stands for an array index, `*` for any hash key, so
`line_items.#.price` covers `line_items[0][price]` and `metadata.*` covers `metadata[plan]`.
A hash or array passed as an empty string (Stripe's "unset") is accepted where the pattern allows
something inside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .errors import StripeError, parameter_unknown
from .params_allowed import ALLOWED

_PAGE = ("limit", "starting_after", "ending_before")
_CREATED = ("created", "created.gt", "created.gte", "created.lt", "created.lte")
_LIST = (*_PAGE, *_CREATED)
_META = ("metadata.*",)
_ADDRESS = tuple(
    f"address.{field}" for field in ("city", "country", "line1", "line2", "postal_code", "state")
)
_RECURRING = ("recurring.interval", "recurring.interval_count")
_PRODUCT_DATA = ("product_data.name", "product_data.description", "product_data.metadata.*")
_PRICE_DATA = (
    "currency",
    "unit_amount",
    "product",
    *_PRODUCT_DATA,
    *_RECURRING,
)
_CUSTOMER_FIELDS = (
    "email",
    "name",
    "phone",
    "description",
    *_META,
    *_ADDRESS,
    "invoice_settings.footer",
    "preferred_locales.#",
    "invoice_settings.default_payment_method",
)
_CANCELLATION = ("cancellation_details.comment", "cancellation_details.feedback")
_SUBSCRIPTION_ITEM = ("price", "quantity")
_SUBSCRIPTION_CREATE = (
    "customer",
    *(f"items.#.{field}" for field in _SUBSCRIPTION_ITEM),
    "default_payment_method",
    "payment_behavior",
    "trial_period_days",
    "trial_end",
    "trial_settings.end_behavior.missing_payment_method",
    "description",
    *_META,
)
_SUBSCRIPTION_UPDATE = (
    "cancel_at_period_end",
    "cancel_at",
    *_CANCELLATION,
    "description",
    *_META,
    "items.#.id",
    "items.#.price",
    "items.#.quantity",
    "items.#.deleted",
    "proration_behavior",
    "proration_date",
    "default_payment_method",
)
_PREVIEW = (
    "customer",
    "subscription",
    "subscription_details.items.#.id",
    "subscription_details.items.#.price",
    "subscription_details.items.#.quantity",
    "subscription_details.items.#.deleted",
    "subscription_details.proration_behavior",
    "subscription_details.proration_date",
)

IMPLEMENTED: dict[str, tuple[str, ...]] = {
    "POST /v1/products": (
        "id",
        "name",
        "active",
        "description",
        *_META,
        "default_price_data.currency",
        "default_price_data.unit_amount",
        *(f"default_price_data.{field}" for field in _RECURRING),
    ),
    "POST /v1/products/{id}": ("name", "active", "description", "default_price", *_META),
    "GET /v1/products": ("active", "ids.#", *_LIST),
    "POST /v1/prices": (
        *_PRICE_DATA,
        "recurring.usage_type",
        "recurring.meter",
        "lookup_key",
        "transfer_lookup_key",
        "nickname",
        "active",
        *_META,
    ),
    "POST /v1/prices/{id}": ("active", "nickname", "lookup_key", "transfer_lookup_key", *_META),
    "GET /v1/prices": (
        "active",
        "currency",
        "product",
        "type",
        "lookup_keys.#",
        "recurring.interval",
        "recurring.usage_type",
        "recurring.meter",
        *_LIST,
    ),
    "POST /v1/customers": (*_CUSTOMER_FIELDS, "payment_method", "test_clock"),
    "POST /v1/customers/{id}": _CUSTOMER_FIELDS,
    "GET /v1/customers": ("email", "test_clock", *_LIST),
    "GET /v1/customers/{id}/payment_methods": ("type", *_PAGE),
    "GET /v1/customers/search": ("query", "limit"),
    "POST /v1/checkout/sessions": (
        "mode",
        "ui_mode",
        "success_url",
        "cancel_url",
        "customer",
        "customer_email",
        "client_reference_id",
        "locale",
        "expires_at",
        "customer_creation",
        *_META,
        "line_items.#.price",
        "line_items.#.quantity",
        *(f"line_items.#.price_data.{field}" for field in _PRICE_DATA),
        "subscription_data.metadata.*",
        "subscription_data.trial_period_days",
        "subscription_data.trial_end",
        "payment_intent_data.metadata.*",
    ),
    "GET /v1/checkout/sessions": (
        "customer",
        "subscription",
        "payment_intent",
        "status",
        "payment_link",
        *_LIST,
    ),
    "GET /v1/checkout/sessions/{id}/line_items": _PAGE,
    "POST /v1/billing_portal/sessions": (
        "customer",
        "return_url",
        "flow_data.type",
        "flow_data.subscription_cancel.subscription",
        "flow_data.subscription_update.subscription",
        "flow_data.after_completion.type",
        "flow_data.after_completion.redirect.return_url",
    ),
    "POST /v1/subscriptions": _SUBSCRIPTION_CREATE,
    "GET /v1/subscriptions": ("status", "customer", "price", "test_clock", *_LIST),
    "GET /v1/subscriptions/search": ("query", "limit"),
    "POST /v1/subscriptions/{id}": _SUBSCRIPTION_UPDATE,
    "DELETE /v1/subscriptions/{id}": _CANCELLATION,
    "GET /v1/subscription_items": ("subscription", *_PAGE),
    "POST /v1/invoices/create_preview": _PREVIEW,
    "GET /v1/invoices": ("customer", "status", "collection_method", "subscription", *_LIST),
    "GET /v1/invoices/{id}/lines": _PAGE,
    "POST /v1/invoices/{id}/pay": ("payment_method",),
    "POST /v1/payment_methods/{id}/attach": ("customer",),
    "GET /v1/test_helpers/test_clocks": _PAGE,
    "POST /v1/test_helpers/test_clocks": ("frozen_time", "name"),
    "POST /v1/test_helpers/test_clocks/{id}/advance": ("frozen_time",),
    "GET /v1/invoice_payments": ("invoice", "payment.type", "payment.payment_intent", "status", *_PAGE),
    "GET /v1/charges": ("customer", "payment_intent", *_LIST),
    "GET /v1/payment_intents": ("customer", *_LIST),
    "POST /v1/payment_intents": (
        "amount",
        "currency",
        "customer",
        "payment_method",
        "confirm",
        "off_session",
        "description",
        "receipt_email",
        "return_url",
        "automatic_payment_methods.enabled",
        "automatic_payment_methods.allow_redirects",
        "payment_method_types.#",
        *_META,
    ),
    "POST /v1/payment_intents/{id}/confirm": ("payment_method", "return_url", "off_session"),
    "POST /v1/refunds": ("charge", "payment_intent", "amount", "reason", *_META),
    "GET /v1/refunds": ("charge", "payment_intent", *_LIST),
    "GET /v1/disputes": ("charge", "payment_intent", *_LIST),
    "POST /v1/disputes/{id}": (
        "evidence.uncategorized_text",
        "evidence.product_description",
        "submit",
        *_META,
    ),
    "GET /v1/balance_transactions": ("source", "type", "currency", *_LIST),
    "GET /v1/products/search": ("query", "limit"),
    "GET /v1/prices/search": ("query", "limit"),
    "GET /v1/events": ("type", "types.#", "delivery_success", *_LIST),
    "POST /v1/events/{id}/retry": ("for_webhook_endpoint",),
    "POST /v1/webhook_endpoints": ("url", "enabled_events.#", "description", "api_version", *_META),
    "POST /v1/webhook_endpoints/{id}": ("url", "enabled_events.#", "description", "disabled", *_META),
    "GET /v1/webhook_endpoints": _PAGE,
    "POST /v1/test_helpers/sandbox/advance": ("seconds", "frozen_time"),
    "POST /v1/test_helpers/customers/{id}/fail_renewals": ("fail",),
    "POST /v1/test_helpers/checkout/sessions/{id}/pay": (
        "card_number",
        "email",
        "name",
        "exp",
        "cvc",
        "three_d_secure",
    ),
    "POST /v1/test_helpers/charges/{id}/dispute": ("reason", "case_type"),
    "POST /v1/billing/meters": (
        "display_name",
        "event_name",
        "default_aggregation.formula",
        "customer_mapping.event_payload_key",
        "customer_mapping.type",
        "value_settings.event_payload_key",
        "event_time_window",
    ),
    "POST /v1/billing/meters/{id}": ("display_name",),
    "GET /v1/billing/meters": ("status", *_PAGE),
    "GET /v1/billing/meters/{id}/event_summaries": (
        "customer",
        "start_time",
        "end_time",
        "value_grouping_window",
        *_PAGE,
    ),
    "POST /v1/billing/meter_events": ("event_name", "payload.*", "identifier", "timestamp"),
}
"""Route ("METHOD /path") -> implemented parameter patterns; `expand` is implemented everywhere.

A route missing here implements `expand` only (retrieves, deletes, actions without parameters)."""

STRIPE_NAMES: dict[str, str] = {
    "POST /v1/products": "product.create",
    "POST /v1/products/{id}": "product.update",
    "GET /v1/products": "product.list",
    "POST /v1/prices": "price.create",
    "POST /v1/prices/{id}": "price.update",
    "GET /v1/prices": "price.list",
    "POST /v1/customers": "customer.create",
    "POST /v1/customers/{id}": "customer.update",
    "GET /v1/customers": "customer.list",
    "GET /v1/customers/search": "customer.search",
    "GET /v1/products/search": "product.search",
    "GET /v1/prices/search": "price.search",
    "POST /v1/checkout/sessions": "checkout_session.create",
    "GET /v1/checkout/sessions": "checkout_session.list",
    "POST /v1/checkout/sessions/{id}/expire": "checkout_session.expire",
    "POST /v1/billing_portal/sessions": "billing_portal_session.create",
    "POST /v1/subscriptions/{id}": "subscription.update",
    "GET /v1/subscriptions": "subscription.list",
    "GET /v1/subscriptions/search": "subscription.search",
    "POST /v1/subscriptions": "subscription.create",
    "DELETE /v1/subscriptions/{id}": "subscription.cancel",
    "GET /v1/invoices": "invoice.list",
    "GET /v1/invoice_payments": "invoice_payment.list",
    "GET /v1/charges": "charge.list",
    "GET /v1/payment_intents": "payment_intent.list",
    "POST /v1/refunds": "refund.create",
    "GET /v1/refunds": "refund.list",
    "GET /v1/disputes": "dispute.list",
    "GET /v1/events": "event.list",
    "POST /v1/webhook_endpoints": "webhook_endpoint.create",
    "POST /v1/webhook_endpoints/{id}": "webhook_endpoint.update",
    "GET /v1/webhook_endpoints": "webhook_endpoint.list",
    "POST /v1/billing/meters": "billing.meter.create",
    "POST /v1/billing/meters/{id}": "billing.meter.update",
    "GET /v1/billing/meters": "billing.meter.list",
    "GET /v1/billing/meters/{id}/event_summaries": "billing.meter.list_event_summaries",
    "POST /v1/billing/meter_events": "billing.meter_event.create",
}
"""Route -> the endpoint's name in `params_allowed.ALLOWED` (Stripe's own parameter list)."""


def _leaves(tree: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(tree, dict) and tree:
        for key, value in tree.items():
            yield from _leaves(value, (*path, key))
    else:
        yield path, tree


def _matches(pattern: tuple[str, ...], path: tuple[str, ...], *, prefix: bool) -> bool:
    if len(path) > len(pattern) or (not prefix and len(path) != len(pattern)):
        return False
    for want, got in zip(pattern, path, strict=False):
        if want == "#":
            if not got.isdigit():
                return False
        elif want != "*" and want != got:
            return False
    return True


def _bracketed(path: tuple[str, ...]) -> str:
    return path[0] + "".join(f"[{p}]" for p in path[1:])


def not_implemented(param: str) -> StripeError:
    return StripeError(
        400,
        f"This parameter is not implemented by the sandbox: {param}. The sandbox answers "
        "rather than ignore it; see docs/stripe-sandbox.md for what it emulates.",
        param=param,
    )


def check(route: str, tree: dict[str, Any]) -> None:
    """Raise for the first parameter of `tree` the sandbox does not implement on `route`."""
    patterns = [tuple(p.split(".")) for p in IMPLEMENTED.get(route, ())]
    patterns += [("expand", "#")]
    known = ALLOWED.get(STRIPE_NAMES.get(route, ""))
    for path, value in _leaves(tree, ()):
        if any(_matches(p, path, prefix=False) for p in patterns):
            continue
        if value in ("", {}) and any(_matches(p, path, prefix=True) for p in patterns):
            continue
        if known is not None and path[0] not in known:
            raise parameter_unknown(path[0])
        raise not_implemented(_bracketed(path))


def implemented_routes() -> dict[str, tuple[str, ...]]:
    """The table, for documentation and tests."""
    return dict(IMPLEMENTED)
