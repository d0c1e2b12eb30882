"""Checkout Sessions: creation rules, payment, expiry, and what a completed session links to."""

from __future__ import annotations

import pytest
import stripe
from stripe.params.checkout import SessionCreateParams

from tests.support.stripe_objects import error_json, expanded, present, unexpanded

from .conftest import Env, catalog, subscribed


async def test_subscription_session_create_retrieve_list(env: Env) -> None:
    _product, price = await catalog(env)
    customer = await env.client.v1.customers.create_async(params={"email": "ada@example.com"})
    now = env.sandbox.now()
    session = await env.client.v1.checkout.sessions.create_async(
        params={
            "mode": "subscription",
            "customer": customer.id,
            "client_reference_id": "user-42",
            "metadata": {"order": "o-1"},
            "subscription_data": {"metadata": {"account": "acct-1"}},
            "line_items": [{"price": price.id, "quantity": 2}],
            "success_url": "https://app.example/ok?session={CHECKOUT_SESSION_ID}",
            "cancel_url": "https://app.example/cancel",
            "expires_at": now + 3600,
        }
    )
    assert session.id.startswith("cs_test_") and session.object == "checkout.session"
    assert session.url == f"{env.base_url}/c/pay/{session.id}"
    assert (session.status, session.payment_status, session.mode) == ("open", "unpaid", "subscription")
    assert session.amount_total == 3000 and session.currency == "usd" and session.expires_at == now + 3600
    assert session.success_url == "https://app.example/ok?session={CHECKOUT_SESSION_ID}"
    assert session.client_reference_id == "user-42"
    assert present(session.metadata).to_dict() == {"order": "o-1"}
    again = await env.client.v1.checkout.sessions.retrieve_async(
        session.id, params={"expand": ["line_items"]}
    )
    assert again.line_items is not None
    assert [(present(i.price).id, i.quantity, i.amount_total) for i in again.line_items.data] == [
        (price.id, 2, 3000)
    ]
    listed = await env.client.v1.checkout.sessions.list_async(params={"customer": customer.id})
    assert [s.id for s in listed.data] == [session.id]
    items = await env.client.v1.checkout.sessions.line_items.list_async(session.id)
    assert items.data[0].description == "Pro plan"


async def test_session_validation_matches_stripe(env: Env) -> None:
    product, price = await catalog(env)
    one_time = await env.client.v1.prices.create_async(
        params={"product": product.id, "currency": "usd", "unit_amount": 500}
    )
    cases: list[tuple[dict[str, object], str]] = [
        ({"mode": "subscription", "line_items": [{"price": one_time.id, "quantity": 1}]}, "line_items"),
        ({"mode": "payment", "line_items": [{"price": price.id, "quantity": 1}]}, "line_items"),
        ({"mode": "subscription"}, "line_items"),
        ({"mode": "subscription", "line_items": [{"price": price.id}]}, "line_items[0][quantity]"),
        (
            {
                "mode": "subscription",
                "line_items": [{"price": price.id, "quantity": 1}],
                "success_url": "nope",
            },
            "success_url",
        ),
        (
            {
                "mode": "subscription",
                "line_items": [{"price": price.id, "quantity": 1}],
                "expires_at": env.sandbox.now() + 60,
            },
            "expires_at",
        ),
        (
            {
                "mode": "subscription",
                "line_items": [{"price": price.id, "quantity": 1}],
                "customer": "cus_missing",
            },
            "customer",
        ),
    ]
    for params, param in cases:
        with pytest.raises(stripe.InvalidRequestError) as info:
            await env.client.v1.checkout.sessions.create_async(params=params)  # type: ignore[arg-type]
        assert info.value.param == param, params


async def test_paying_creates_subscription_invoice_and_payment(env: Env) -> None:
    state = await subscribed(env)
    session, sub, customer, price = state["session"], state["subscription"], state["customer"], state["price"]
    assert (session.status, session.payment_status) == ("complete", "paid")
    assert session.customer == customer.id and session.subscription == sub.id and session.url is None
    assert sub.status == "active" and sub.metadata.to_dict() == {"account": "acct-1"}
    item = sub["items"].data[0]
    assert item.price.id == price.id and item.current_period_end > item.current_period_start
    invoice = await env.client.v1.invoices.retrieve_async(
        unexpanded(sub.latest_invoice), params={"expand": ["payments"]}
    )
    assert (invoice.status, invoice.billing_reason, invoice.amount_paid) == (
        "paid",
        "subscription_create",
        1500,
    )
    assert invoice.parent is not None and invoice.parent.subscription_details is not None
    assert invoice.parent.subscription_details.subscription == sub.id
    assert invoice.payments is not None
    payment = invoice.payments.data[0]
    assert payment.status == "paid" and payment.payment.type == "payment_intent"
    intent = await env.client.v1.payment_intents.retrieve_async(unexpanded(payment.payment.payment_intent))
    charge = await env.client.v1.charges.retrieve_async(unexpanded(intent.latest_charge))
    assert (intent.status, charge.status, charge.amount, charge.paid) == (
        "succeeded",
        "succeeded",
        1500,
        True,
    )
    assert present(present(charge.payment_method_details).card).last4 == "4242"
    by_pi = await env.client.v1.invoice_payments.list_async(
        params={"payment": {"type": "payment_intent", "payment_intent": intent.id}}
    )
    assert [p.invoice for p in by_pi.data] == [invoice.id]
    with_subscription = await env.client.v1.checkout.sessions.retrieve_async(
        session.id, params={"expand": ["subscription"]}
    )
    subscription = expanded(with_subscription.subscription)
    assert subscription.id == sub.id and subscription.status == "active"


@pytest.mark.parametrize(
    ("card", "decline_code"),
    [("4000000000000002", "generic_decline"), ("4000000000009995", "insufficient_funds")],
)
async def test_declined_cards_leave_session_open_and_create_nothing(
    env: Env, card: str, decline_code: str
) -> None:
    _product, price = await catalog(env)
    session = await env.client.v1.checkout.sessions.create_async(
        params={"mode": "subscription", "line_items": [{"price": price.id, "quantity": 1}]}
    )
    with pytest.raises(stripe.CardError) as info:
        await env.raw(f"/v1/test_helpers/checkout/sessions/{session.id}/pay", card_number=card)
    assert error_json(info.value)["decline_code"] == decline_code
    again = await env.client.v1.checkout.sessions.retrieve_async(session.id)
    assert (again.status, again.subscription, again.customer) == ("open", None, None)
    assert (await env.client.v1.subscriptions.list_async(params={"status": "all"})).data == []
    assert (await env.client.v1.customers.list_async()).data == []


async def test_session_without_customer_creates_one(env: Env) -> None:
    _product, price = await catalog(env)
    session = await env.client.v1.checkout.sessions.create_async(
        params={
            "mode": "subscription",
            "line_items": [{"price": price.id, "quantity": 1}],
            "customer_email": "new@example.com",
        }
    )
    await env.raw(
        f"/v1/test_helpers/checkout/sessions/{session.id}/pay",
        card_number="4242 4242 4242 4242",
        email="new@example.com",
        name="New Person",
    )
    done = await env.client.v1.checkout.sessions.retrieve_async(session.id, params={"expand": ["customer"]})
    customer = expanded(done.customer)
    assert customer.email == "new@example.com" and customer.name == "New Person"
    assert done.customer_details is not None and done.customer_details.email == "new@example.com"
    await env.sandbox.deliver_pending()
    assert "customer.created" in env.receiver.types()


async def test_payment_mode(env: Env) -> None:
    product, _price = await catalog(env)
    one_time = await env.client.v1.prices.create_async(
        params={"product": product.id, "currency": "eur", "unit_amount": 700}
    )
    session = await env.client.v1.checkout.sessions.create_async(
        params={
            "mode": "payment",
            "line_items": [{"price": one_time.id, "quantity": 3}],
            "payment_intent_data": {"metadata": {"order": "o-9"}},
        }
    )
    await env.raw(f"/v1/test_helpers/checkout/sessions/{session.id}/pay", card_number="4242424242424242")
    done = await env.client.v1.checkout.sessions.retrieve_async(
        session.id, params={"expand": ["payment_intent"]}
    )
    assert done.payment_status == "paid" and done.subscription is None and done.customer is None
    intent = expanded(done.payment_intent)
    assert intent.amount == 2100 and intent.currency == "eur"
    assert intent.metadata.to_dict() == {"order": "o-9"}


async def test_expire_by_api_and_by_clock(env: Env) -> None:
    _product, price = await catalog(env)
    params: SessionCreateParams = {"mode": "subscription", "line_items": [{"price": price.id, "quantity": 1}]}
    first = await env.client.v1.checkout.sessions.create_async(params=params)
    expired = await env.client.v1.checkout.sessions.expire_async(first.id)
    assert (expired.status, expired.url) == ("expired", None)
    with pytest.raises(stripe.InvalidRequestError):
        await env.client.v1.checkout.sessions.expire_async(first.id)
    second = await env.client.v1.checkout.sessions.create_async(params=params)
    await env.advance(24 * 3600 + 1)
    assert (await env.client.v1.checkout.sessions.retrieve_async(second.id)).status == "expired"
    events = await env.client.v1.events.list_async(params={"type": "checkout.session.expired"})
    assert {e.data.object.id for e in events.data} == {first.id, second.id}
    with pytest.raises(stripe.InvalidRequestError):
        await env.raw(f"/v1/test_helpers/checkout/sessions/{second.id}/pay", card_number="4242424242424242")


async def test_reads_between_changes_still_see_what_fell_due(env: Env) -> None:
    """Reads skip the due-work scan while nothing changed and nothing is due yet; a change, or
    time passing a due point, makes the next read look again."""
    _product, price = await catalog(env)
    params: SessionCreateParams = {"mode": "subscription", "line_items": [{"price": price.id, "quantity": 1}]}
    await env.client.v1.products.list_async()  # a read: nothing due, remembered
    session = await env.client.v1.checkout.sessions.create_async(
        params={**params, "expires_at": env.sandbox.now() + 3600}
    )
    assert (await env.client.v1.checkout.sessions.retrieve_async(session.id)).status == "open"
    assert env.sandbox.due_hint is not None and env.sandbox.due_hint[1] == session.expires_at
    # Wall-clock time passing the expiry (no request in between that changes anything).
    env.sandbox.store.clock_offset += 3601
    assert (await env.client.v1.checkout.sessions.retrieve_async(session.id)).status == "expired"
