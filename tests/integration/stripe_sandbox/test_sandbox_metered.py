"""Metered prices: usage counted by a Billing Meter, billed in arrears on the period-end invoice;
and one-time Checkout payments as credit packs are bought."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
import stripe
from stripe.params import PriceCreateParamsRecurring
from stripe.params.billing import MeterEventCreateParams

from tests.support.stripe_objects import present, unexpanded

from .conftest import Env, catalog

DAY = 86400
MONTH = 31 * DAY


async def _metered_price(env: Env, unit_amount: int = 2, event_name: str = "sql_explain") -> Any:
    meter = await env.client.v1.billing.meters.create_async(
        params={
            "display_name": event_name,
            "event_name": event_name,
            "default_aggregation": {"formula": "sum"},
        }
    )
    return await env.client.v1.prices.create_async(
        params={
            "currency": "usd",
            "unit_amount": unit_amount,
            "product_data": {"name": "sql_explain calls"},
            "recurring": {"interval": "month", "usage_type": "metered", "meter": meter.id},
        }
    )


async def _use(env: Env, customer: str, value: int, *, timestamp: int | None = None) -> None:
    params: MeterEventCreateParams = {
        "event_name": "sql_explain",
        "payload": {"stripe_customer_id": customer, "value": str(value)},
    }
    if timestamp is not None:
        params["timestamp"] = timestamp
    await env.client.v1.billing.meter_events.create_async(params=params)


async def _paying_customer(env: Env) -> Any:
    return await env.client.v1.customers.create_async(
        params={
            "payment_method": "pm_card_visa",
            "invoice_settings": {"default_payment_method": "pm_card_visa"},
        }
    )


def _wire(obj: stripe.StripeObject) -> dict[str, Any]:
    assert obj.last_response is not None
    data: dict[str, Any] = json.loads(obj.last_response.body)
    return data


async def test_metered_price_needs_an_active_meter(env: Env) -> None:
    price = await _metered_price(env)
    assert price.recurring.usage_type == "metered" and price.recurring.meter.startswith("mtr_test_")
    assert price.type == "recurring" and price.unit_amount == 2
    listed = await env.client.v1.prices.list_async(params={"recurring": {"usage_type": "metered"}})
    assert [p.id for p in listed.data] == [price.id]
    licensed = await env.client.v1.prices.list_async(params={"recurring": {"usage_type": "licensed"}})
    assert licensed.data == []

    async def create(
        usage_type: Literal["licensed", "metered"] | None = None, meter: str | None = None
    ) -> stripe.Price:
        recurring: PriceCreateParamsRecurring = {"interval": "month"}
        if usage_type is not None:
            recurring["usage_type"] = usage_type
        if meter is not None:
            recurring["meter"] = meter
        return await env.client.v1.prices.create_async(
            params={
                "currency": "usd",
                "unit_amount": 2,
                "product": price.product,
                "recurring": recurring,
            }
        )

    with pytest.raises(stripe.InvalidRequestError) as no_meter:
        await create(usage_type="metered")
    assert no_meter.value.param == "recurring[meter]"
    with pytest.raises(stripe.InvalidRequestError) as licensed_with_meter:
        await create(meter=price.recurring.meter)
    assert licensed_with_meter.value.param == "recurring[meter]"
    with pytest.raises(stripe.InvalidRequestError) as unknown:
        await create(usage_type="metered", meter="mtr_test_nope")
    assert unknown.value.code == "resource_missing" and unknown.value.param == "recurring[meter]"
    await env.client.v1.billing.meters.deactivate_async(price.recurring.meter)
    with pytest.raises(stripe.InvalidRequestError) as inactive:
        await create(usage_type="metered", meter=price.recurring.meter)
    assert inactive.value.param == "recurring[meter]"


async def test_checkout_pay_as_you_go_bills_usage_at_period_end(env: Env) -> None:
    price = await _metered_price(env)
    customer = await env.client.v1.customers.create_async(params={"email": "payg@example.com"})
    with pytest.raises(stripe.InvalidRequestError) as quantity:
        await env.client.v1.checkout.sessions.create_async(
            params={"mode": "subscription", "line_items": [{"price": price.id, "quantity": 1}]}
        )
    assert quantity.value.param == "line_items[0][quantity]"
    assert "Quantity should not be specified where usage_type is `metered`" in str(
        quantity.value.user_message
    )
    session = await env.client.v1.checkout.sessions.create_async(
        params={
            "mode": "subscription",
            "customer": customer.id,
            "line_items": [{"price": price.id}],
            "success_url": "https://app.example/ok",
        }
    )
    assert session.amount_total == 0
    [line_item] = (await env.client.v1.checkout.sessions.line_items.list_async(session.id)).data
    assert line_item.quantity is None and line_item.amount_total == 0
    await env.raw(f"/v1/test_helpers/checkout/sessions/{session.id}/pay", card_number="4242424242424242")
    session = await env.client.v1.checkout.sessions.retrieve_async(session.id)
    sub = await env.client.v1.subscriptions.retrieve_async(unexpanded(session.subscription))
    assert sub.status == "active"
    item_json = _wire(sub)["items"]["data"][0]
    assert "quantity" not in item_json and item_json["price"]["recurring"]["usage_type"] == "metered"
    assert (
        item_json["plan"]["usage_type"] == "metered" and item_json["plan"]["meter"] == price.recurring.meter
    )
    first = await env.client.v1.invoices.retrieve_async(unexpanded(sub.latest_invoice))
    assert (first.status, first.amount_due) == ("paid", 0)
    assert [(line.quantity, line.amount) for line in first.lines.data] == [(0, 0)]

    period_start = item_json["current_period_start"]
    period_end = item_json["current_period_end"]
    for _ in range(7):
        await _use(env, customer.id, 1)
    await _use(env, customer.id, 3)
    preview = await env.client.v1.invoices.create_preview_async(params={"subscription": sub.id})
    assert preview.amount_due == 20 and preview.lines.data[0].quantity == 10

    await env.advance(MONTH + 1)
    invoices = (await env.client.v1.invoices.list_async(params={"subscription": sub.id})).data
    renewal = invoices[0]
    assert renewal.billing_reason == "subscription_cycle"
    assert (renewal.status, renewal.amount_due, renewal.amount_paid) == ("paid", 20, 20)
    [usage_line] = renewal.lines.data
    assert (usage_line.quantity, usage_line.amount) == (10, 20)
    assert (usage_line.period.start, usage_line.period.end) == (period_start, period_end)
    assert present(present(usage_line.pricing).price_details).price == price.id

    # The next period starts at zero: only what is used from now on is billed next time.
    await _use(env, customer.id, 4)
    await env.advance(MONTH + 1)
    latest = (await env.client.v1.invoices.list_async(params={"subscription": sub.id, "limit": 1})).data[0]
    assert (latest.amount_due, latest.lines.data[0].quantity, latest.status) == (8, 4, "paid")
    await env.sandbox.deliver_pending()
    paid = [e for e in env.receiver.events if e.type == "invoice.paid"]
    assert sorted(e.data.object.amount_paid for e in paid) == [0, 8, 20]  # delivery order varies


async def test_nothing_used_is_an_invoice_of_zero_paid_without_a_charge(env: Env) -> None:
    price = await _metered_price(env)
    customer = await _paying_customer(env)
    sub = await env.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": price.id}]}
    )
    await env.advance(MONTH + 1)
    renewal = (await env.client.v1.invoices.list_async(params={"subscription": sub.id, "limit": 1})).data[0]
    assert (renewal.amount_due, renewal.status) == (0, "paid")
    assert (await env.client.v1.charges.list_async(params={"customer": customer.id})).data == []


async def test_usage_only_subscription_needs_no_card_until_it_owes(env: Env) -> None:
    price = await _metered_price(env)
    customer = await env.client.v1.customers.create_async()
    sub = await env.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": price.id}]}
    )
    assert sub.status == "active"
    await _use(env, customer.id, 30)
    await env.advance(MONTH + 1)
    owed = (await env.client.v1.invoices.list_async(params={"subscription": sub.id, "limit": 1})).data[0]
    assert (owed.amount_due, owed.status, owed.attempt_count) == (60, "open", 1)
    assert (await env.client.v1.subscriptions.retrieve_async(sub.id)).status == "past_due"


async def test_subscription_with_base_fee_and_overage_on_a_test_clock(env: Env) -> None:
    """Pro (a licensed price) plus metered overage, created without Checkout, on a test clock:
    usage is reported in the clock's time and billed when the clock passes the period end."""
    metered = await _metered_price(env, unit_amount=3)
    _product, base = await catalog(env, amount=1500)
    start = (await env.client.v1.customers.create_async()).created - 60 * DAY
    clocks = env.client.v1.test_helpers.test_clocks
    clock = await clocks.create_async(params={"frozen_time": start})
    customer = await env.client.v1.customers.create_async(
        params={
            "test_clock": clock.id,
            "payment_method": "pm_card_visa",
            "invoice_settings": {"default_payment_method": "pm_card_visa"},
        }
    )
    with pytest.raises(stripe.InvalidRequestError) as quantity:
        await env.client.v1.subscriptions.create_async(
            params={"customer": customer.id, "items": [{"price": metered.id, "quantity": 2}]}
        )
    assert quantity.value.param == "items[0][quantity]"
    assert quantity.value.user_message == "You cannot set the quantity for metered plans."
    sub = await env.client.v1.subscriptions.create_async(
        params={
            "customer": customer.id,
            "items": [{"price": base.id, "quantity": 1}, {"price": metered.id}],
        }
    )
    assert sub.status == "active" and sub.start_date == start
    first = await env.client.v1.invoices.retrieve_async(unexpanded(sub.latest_invoice))
    assert first.amount_paid == 1500
    # "Now" for this customer's events is the clock's time, 60 days behind the sandbox's.
    with pytest.raises(stripe.InvalidRequestError) as ahead:
        await _use(env, customer.id, 1, timestamp=start + 60 * DAY)
    assert ahead.value.param == "timestamp"
    await _use(env, customer.id, 100)
    await clocks.advance_async(clock.id, params={"frozen_time": start + 2 * DAY})
    await _use(env, customer.id, 50, timestamp=start + DAY)
    period_end = sub["items"].data[0].current_period_end
    await clocks.advance_async(clock.id, params={"frozen_time": period_end + 60})
    assert (await clocks.retrieve_async(clock.id)).status == "ready"
    renewal = (await env.client.v1.invoices.list_async(params={"subscription": sub.id, "limit": 1})).data[0]
    amounts = sorted((line.amount, line.quantity) for line in renewal.lines.data)
    assert amounts == [(450, 150), (1500, 1)]
    assert (renewal.amount_paid, renewal.status, renewal.period_end) == (1950, "paid", period_end)


async def test_cancel_at_period_end_bills_the_last_usage(env: Env) -> None:
    price = await _metered_price(env, unit_amount=5)
    customer = await _paying_customer(env)
    sub = await env.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": price.id}]}
    )
    await _use(env, customer.id, 20)
    await env.client.v1.subscriptions.update_async(sub.id, params={"cancel_at_period_end": True})
    await env.advance(MONTH + 1)
    ended = await env.client.v1.subscriptions.retrieve_async(sub.id)
    assert ended.status == "canceled"
    final = (await env.client.v1.invoices.list_async(params={"subscription": sub.id, "limit": 1})).data[0]
    assert (final.amount_paid, final.lines.data[0].quantity) == (100, 20)


async def test_overage_item_added_to_a_running_subscription(env: Env) -> None:
    """A metered item added mid-period bills the usage from then on; existing metered items
    cannot be changed or removed in the sandbox."""
    _product, base = await catalog(env, amount=1000)
    metered = await _metered_price(env, unit_amount=2)
    customer = await _paying_customer(env)
    sub = await env.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": base.id, "quantity": 1}]}
    )
    await _use(env, customer.id, 500)  # before the overage item exists: never billed
    await env.advance(DAY)
    with pytest.raises(stripe.InvalidRequestError) as quantity:
        await env.client.v1.subscriptions.update_async(
            sub.id, params={"items": [{"price": metered.id, "quantity": 1}]}
        )
    assert quantity.value.param == "items[0][quantity]"
    updated = await env.client.v1.subscriptions.update_async(
        sub.id, params={"items": [{"price": metered.id}]}
    )
    added = next(i for i in updated["items"].data if i.price.id == metered.id)
    assert "quantity" not in added
    assert (await env.client.v1.invoices.list_async(params={"subscription": sub.id})).data[
        0
    ].billing_reason == ("subscription_create")  # adding a metered item prorates nothing
    await _use(env, customer.id, 40)
    with pytest.raises(stripe.InvalidRequestError) as refused:
        await env.client.v1.subscriptions.update_async(
            sub.id, params={"items": [{"id": added.id, "deleted": True}]}
        )
    assert "not implemented by the sandbox" in str(refused.value.user_message)
    await env.advance(MONTH)
    renewal = (await env.client.v1.invoices.list_async(params={"subscription": sub.id, "limit": 1})).data[0]
    assert sorted((line.amount, line.quantity) for line in renewal.lines.data) == [(80, 40), (1000, 1)]
    assert renewal.amount_paid == 1080
    overage = next(line for line in renewal.lines.data if line.amount == 80)
    assert overage.period.start == added.created  # billed from when the item was added


async def test_credit_pack_bought_in_payment_mode(env: Env) -> None:
    """A one-time price through Checkout in payment mode, as a credit pack is sold: the webhook
    says what was paid, and the payment can be refunded."""
    product = await env.client.v1.products.create_async(params={"name": "100 calls"})
    pack = await env.client.v1.prices.create_async(
        params={"product": product.id, "currency": "usd", "unit_amount": 500, "lookup_key": "credits_100"}
    )
    assert pack.type == "one_time" and pack.recurring is None
    customer = await env.client.v1.customers.create_async(params={"email": "credits@example.com"})
    session = await env.client.v1.checkout.sessions.create_async(
        params={
            "mode": "payment",
            "customer": customer.id,
            "client_reference_id": "user-7",
            "line_items": [{"price": pack.id, "quantity": 1}],
            "metadata": {"pack": "credits_100"},
            "success_url": "https://app.example/ok",
        }
    )
    assert (session.amount_total, session.payment_intent) == (500, None)
    await env.raw(f"/v1/test_helpers/checkout/sessions/{session.id}/pay", card_number="4242424242424242")
    await env.sandbox.deliver_pending()
    [completed] = [e for e in env.receiver.events if e.type == "checkout.session.completed"]
    done = completed.data.object
    assert (done.mode, done.status, done.payment_status) == ("payment", "complete", "paid")
    assert (done.amount_total, done.currency, done.customer) == (500, "usd", customer.id)
    assert done.client_reference_id == "user-7" and done.metadata.to_dict() == {"pack": "credits_100"}
    assert done.subscription is None and done.invoice is None
    intent = await env.client.v1.payment_intents.retrieve_async(done.payment_intent)
    assert (intent.status, intent.amount_received, intent.customer) == ("succeeded", 500, customer.id)
    refund = await env.client.v1.refunds.create_async(params={"payment_intent": intent.id})
    assert refund.amount == 500 and refund.status == "succeeded"
    await env.sandbox.deliver_pending()
    [refunded] = [e for e in env.receiver.events if e.type == "charge.refunded"]
    assert refunded.data.object.payment_intent == intent.id and refunded.data.object.refunded is True
