"""Every object the sandbox returns, compared with Stripe's own example object (fixtures3.json).

Same top-level keys, and the same JSON type for every value, except where the API version that
stripe-python 16.1 pins differs from the fixtures; those differences are listed explicitly below so
that a new difference fails the test instead of slipping through.
"""

from __future__ import annotations

import json
from typing import Any

import stripe
from stripe._api_version import _ApiVersion

from stripe_sandbox import API_VERSION
from tests.support.stripe_objects import present, unexpanded

from .conftest import FIXTURES, Env, subscribed

# Keys in the fixture that the pinned API version no longer returns (or only when expanded).
NOT_RETURNED: dict[str, set[str]] = {
    # Removed in 2025-03-31.basil: an invoice reaches its subscription via parent.subscription_details.
    "invoice": {"subscription"},
    # Includable since 2022-11-15: present only with expand[]=refunds.
    "charge": {"refunds"},
}
# Keys the sandbox returns that the fixture lacks.
EXTRA: dict[str, set[str]] = {
    # Only in the response to webhook_endpoints.create, as on Stripe.
    "webhook_endpoint": {"secret"},
}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def _nullable(resource: str, key: str) -> bool:
    """Whether stripe-python types this field as Optional (i.e. Stripe may send null)."""
    classes: dict[str, Any] = {
        "product": stripe.Product,
        "price": stripe.Price,
        "customer": stripe.Customer,
        "checkout.session": stripe.checkout.Session,
        "subscription": stripe.Subscription,
        "subscription_item": stripe.SubscriptionItem,
        "invoice": stripe.Invoice,
        "line_item": stripe.InvoiceLineItem,
        "item": stripe.LineItem,
        "charge": stripe.Charge,
        "payment_intent": stripe.PaymentIntent,
        "payment_method": stripe.PaymentMethod,
        "invoice_payment": stripe.InvoicePayment,
        "refund": stripe.Refund,
        "dispute": stripe.Dispute,
        "event": stripe.Event,
        "webhook_endpoint": stripe.WebhookEndpoint,
        "billing_portal.session": stripe.billing_portal.Session,
        "billing.meter": stripe.billing.Meter,
        "billing.meter_event": stripe.billing.MeterEvent,
        "billing.meter_event_summary": stripe.billing.MeterEventSummary,
    }
    for cls in classes[resource].__mro__:
        annotation = getattr(cls, "__annotations__", {}).get(key)
        if annotation is not None:
            return "Optional" in str(annotation) or "NoneType" in str(annotation)
    return False


def compare(resource: str, ours: dict[str, Any]) -> None:
    fixture = json.loads(FIXTURES.read_text())["resources"][resource]
    expected = (set(fixture) - NOT_RETURNED.get(resource, set())) | EXTRA.get(resource, set())
    assert set(ours) == expected, (
        resource,
        sorted(set(ours) - expected),
        sorted(expected - set(ours)),
    )
    for key in set(ours) & set(fixture):
        mine, theirs = ours[key], fixture[key]
        if mine is None:
            assert theirs is None or _nullable(resource, key), (resource, key, "null but not nullable")
        elif theirs is not None:
            assert _json_type(mine) == _json_type(theirs), (resource, key, mine, theirs)


def test_api_version_is_the_one_stripe_python_pins() -> None:
    assert API_VERSION == _ApiVersion.CURRENT == stripe.api_version


def wire(obj: stripe.StripeObject) -> dict[str, Any]:
    """The JSON exactly as the sandbox sent it (stripe-python turns decimal strings into Decimal)."""
    assert obj.last_response is not None
    data: dict[str, Any] = json.loads(obj.last_response.body)
    return data


async def test_every_returned_object_matches_its_fixture(env: Env) -> None:
    state = await subscribed(env)
    sub, session = state["subscription"], state["session"]
    get = env.client.v1
    invoice = await get.invoices.retrieve_async(unexpanded(sub.latest_invoice))
    payments = await get.invoice_payments.list_async(params={"invoice": invoice.id})
    intent = await get.payment_intents.retrieve_async(unexpanded(payments.data[0].payment.payment_intent))
    charge = await get.charges.retrieve_async(unexpanded(intent.latest_charge))
    refund = await get.refunds.create_async(params={"charge": charge.id, "amount": 100})
    dispute = await env.raw(f"/v1/test_helpers/charges/{charge.id}/dispute")
    portal = await get.billing_portal.sessions.create_async(params={"customer": unexpanded(sub.customer)})
    endpoint = await get.webhook_endpoints.create_async(
        params={"url": "https://example.com/hook", "enabled_events": ["*"]}
    )
    events = await get.events.list_async(params={"limit": 1})
    line_items = await get.checkout.sessions.line_items.list_async(session.id)
    sub_json = wire(await get.subscriptions.retrieve_async(sub.id))
    invoice_json = wire(invoice)
    samples: dict[str, dict[str, Any]] = {
        "product": wire(await get.products.retrieve_async(unexpanded(state["price"].product))),
        "price": wire(await get.prices.retrieve_async(state["price"].id)),
        "customer": wire(await get.customers.retrieve_async(unexpanded(sub.customer))),
        "checkout.session": wire(await get.checkout.sessions.retrieve_async(session.id)),
        "subscription": sub_json,
        "subscription_item": sub_json["items"]["data"][0],
        "invoice": invoice_json,
        "line_item": invoice_json["lines"]["data"][0],
        "item": wire(line_items)["data"][0],
        "invoice_payment": wire(payments)["data"][0],
        "payment_intent": wire(intent),
        "payment_method": wire(await get.payment_methods.retrieve_async(present(charge.payment_method))),
        "charge": wire(charge),
        "refund": wire(refund),
        "dispute": json.loads(json.dumps(dispute.to_dict())),
        "billing_portal.session": wire(portal),
        "webhook_endpoint": wire(endpoint),
        "event": wire(events)["data"][0],
    }
    for resource, ours in samples.items():
        compare(resource, ours)


async def test_meter_objects_match_their_fixtures(env: Env) -> None:
    get = env.client.v1
    meter = await get.billing.meters.create_async(
        params={"display_name": "Calls", "event_name": "calls", "default_aggregation": {"formula": "sum"}}
    )
    customer = await get.customers.create_async()
    event = await get.billing.meter_events.create_async(
        params={"event_name": "calls", "payload": {"stripe_customer_id": customer.id, "value": "3"}}
    )
    start = event.timestamp - event.timestamp % 60
    summaries = await get.billing.meters.event_summaries.list_async(
        meter.id, params={"customer": customer.id, "start_time": start, "end_time": start + 60}
    )
    compare("billing.meter", wire(meter))
    compare("billing.meter_event", wire(event))
    compare("billing.meter_event_summary", wire(summaries)["data"][0])
