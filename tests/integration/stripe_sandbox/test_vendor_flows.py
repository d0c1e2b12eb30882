"""Flows a SaaS vendor tests against Stripe, written only against stripe-python's public API.

They run against the built-in sandbox by default and, unchanged, against Stripe test mode when
`STRIPE_SECRET_KEY=sk_test_...` is set in the environment; tests that need something only the
sandbox offers (a local webhook receiver, its clock helper, its settings) skip there. Nothing here
reads the sandbox's internals to decide a result: what a vendor can see through the API is what is
asserted.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
import stripe
from stripe.params import PaymentIntentCreateParams, PaymentIntentCreateParamsAutomaticPaymentMethods
from stripe.params.billing import MeterEventSummaryListParams
from stripe.params.billing_portal import SessionCreateParamsFlowData
from stripe.test_helpers import TestClock as Clock  # not as TestClock: pytest would collect it

from tests.support.stripe_objects import error_json, expanded, present

from .conftest import Env, Receiver, sandbox_env, stripe_client

STRIPE_KEY = os.environ.get("STRIPE_SECRET_KEY", "")
ON_STRIPE = STRIPE_KEY.startswith("sk_test_")
STRIPE_API = "https://api.stripe.com"


@dataclass
class Vendor:
    """A vendor's view: a client, and the sandbox behind it when there is one."""

    client: stripe.StripeClient
    env: Env | None

    def sandbox(self) -> Env:
        """The sandbox behind the client; skips the test on Stripe test mode."""
        if self.env is None:
            pytest.skip("needs the sandbox (a local webhook receiver or a sandbox setting)")
        return self.env

    def tag(self) -> str:
        """A unique string, so runs against a shared Stripe account do not see each other."""
        return uuid.uuid4().hex[:12]


@pytest.fixture
async def vendor(receiver: Receiver) -> AsyncIterator[Vendor]:
    if ON_STRIPE:
        async with stripe_client(STRIPE_API, STRIPE_KEY) as client:
            yield Vendor(client, None)
        return
    async with sandbox_env(receiver) as env:
        yield Vendor(env.client, env)


async def raw_post(client: stripe.StripeClient, path: str, **params: Any) -> stripe.StripeObject:
    response = await client.raw_request_async("post", path, **params)
    return client.deserialize(response, api_mode="V1")


# No silent drops ------------------------------------------------------------------------------


async def test_customer_keeps_what_it_accepts(vendor: Vendor) -> None:
    tag = vendor.tag()
    customer = await vendor.client.v1.customers.create_async(
        params={
            "email": f"{tag}@example.com",
            "address": {"line1": "1 Main St", "city": "Springfield", "country": "US", "postal_code": "12345"},
            "invoice_settings": {"footer": "Thanks for your business"},
            "preferred_locales": ["en", "fr-FR"],
        }
    )
    again = await vendor.client.v1.customers.retrieve_async(customer.id)
    assert again.address is not None
    assert (again.address.line1, again.address.city, again.address.country) == (
        "1 Main St",
        "Springfield",
        "US",
    )
    assert present(again.invoice_settings).footer == "Thanks for your business"
    assert again.preferred_locales == ["en", "fr-FR"]
    updated = await vendor.client.v1.customers.update_async(
        customer.id, params={"address": {"line2": "Suite 5"}, "preferred_locales": ["de"]}
    )
    assert updated.address is not None
    assert (updated.address.line1, updated.address.line2) == ("1 Main St", "Suite 5")
    assert updated.preferred_locales == ["de"]


async def test_what_the_sandbox_does_not_implement_answers_400(vendor: Vendor) -> None:
    env = vendor.sandbox()  # on Stripe these parameters simply work
    before = await env.client.v1.customers.list_async()
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.customers.create_async(params={"email": "a@example.com", "tax_exempt": "exempt"})
    assert info.value.http_status == 400 and info.value.param == "tax_exempt"
    assert "not implemented by the sandbox" in str(info.value.user_message)
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.customers.create_async(
            # A custom field without its value, on purpose.
            params={"invoice_settings": {"custom_fields": [{"name": "PO"}]}}  # type: ignore[arg-type]
        )
    assert info.value.param == "invoice_settings[custom_fields][0][name]"
    with pytest.raises(stripe.InvalidRequestError) as info:
        # An unknown parameter, on purpose.
        await env.client.v1.customers.create_async(params={"not_a_stripe_param": "x"})  # type: ignore[arg-type]
    assert "Received unknown parameter: not_a_stripe_param" in str(info.value.user_message)
    after = await env.client.v1.customers.list_async()
    assert [c.id for c in after.data] == [c.id for c in before.data]  # nothing was created


# Webhook retries ------------------------------------------------------------------------------


async def test_webhooks_outlast_an_endpoint_outage(vendor: Vendor) -> None:
    vendor.sandbox()
    receiver = Receiver(fail_attempts=12)  # more failures than a 30-second schedule survives
    async with sandbox_env(receiver, webhook_retry_base=0.01, webhook_retry_max_delay=0.05) as env:
        customer = await env.client.v1.customers.create_async(params={"email": "ada@example.com"})
        await receiver.wait_for(lambda r: any(e.data.object.id == customer.id for e in r.events), within=30)
        [event] = (await env.client.v1.events.list_async(params={"type": "customer.created"})).data
        assert event.pending_webhooks == 0
        assert [s for i, s in receiver.statuses if i == event.id] == [500] * 12 + [200]


async def test_given_up_event_stays_pending_and_can_be_resent(vendor: Vendor) -> None:
    vendor.sandbox()
    receiver = Receiver(fail_attempts=1000)
    async with sandbox_env(
        receiver, webhook_retry_base=0.01, webhook_retry_max_delay=0.02, webhook_retry_window=0.1
    ) as env:
        await env.client.v1.customers.create_async(params={"email": "ada@example.com"})
        await env.sandbox.deliver_pending()  # the queue empties once delivery is given up
        [event] = (await env.client.v1.events.list_async(params={"delivery_success": False})).data
        assert event.type == "customer.created" and event.pending_webhooks == 1
        assert receiver.events == []
        receiver.fail_attempts = 0
        resent = await raw_post(env.client, f"/v1/events/{event.id}/retry")
        assert isinstance(resent, stripe.Event) and resent.id == event.id
        await receiver.wait_for(lambda r: [e.id for e in r.events] == [event.id])
        await env.sandbox.deliver_pending()
        assert (await env.client.v1.events.retrieve_async(event.id)).pending_webhooks == 0
        delivered = await env.client.v1.events.list_async(params={"delivery_success": True})
        assert event.id in {e.id for e in delivered.data}


# Helpers for flows that take a moment on Stripe ----------------------------------------------

DAY = 86400


async def until(check: Callable[[], Awaitable[Any]], *, tries: int = 60) -> Any:
    """Poll `check` until it returns something truthy. The sandbox finishes work before it answers
    the next request, so it needs no pause; Stripe test mode does its work in the background."""
    for _ in range(tries):
        result = await check()
        if result:
            return result
        if ON_STRIPE:
            await asyncio.sleep(2)
    raise AssertionError("condition not reached")


async def recurring_price(vendor: Vendor, amount: int = 1500, interval: str = "month") -> stripe.Price:
    product = await vendor.client.v1.products.create_async(params={"name": f"Pro {vendor.tag()}"})
    return await vendor.client.v1.prices.create_async(
        params={
            "product": product.id,
            "currency": "usd",
            "unit_amount": amount,
            "recurring": {"interval": interval},
        }
    )


async def advance(vendor: Vendor, clock_id: str, to: int) -> None:
    clocks = vendor.client.v1.test_helpers.test_clocks
    started = await clocks.advance_async(clock_id, params={"frozen_time": to})
    assert started.status == "advancing"

    async def ready() -> bool:
        clock = await clocks.retrieve_async(clock_id)
        return clock.status == "ready" and clock.frozen_time == to

    await until(ready)


@pytest.fixture
async def clock(vendor: Vendor) -> AsyncIterator[Clock]:
    clocks = vendor.client.v1.test_helpers.test_clocks
    created = await clocks.create_async(params={"frozen_time": int(time.time()), "name": "vendor flows"})
    yield created
    await clocks.delete_async(created.id)


# Subscriptions without Checkout, test payment methods -----------------------------------------


async def test_subscription_created_with_a_test_card(vendor: Vendor) -> None:
    price = await recurring_price(vendor)
    customer = await vendor.client.v1.customers.create_async(
        params={
            "email": f"{vendor.tag()}@example.com",
            "payment_method": "pm_card_visa",
            "invoice_settings": {"default_payment_method": "pm_card_visa"},
        }
    )
    default_pm = present(customer.invoice_settings).default_payment_method
    assert isinstance(default_pm, str) and default_pm.startswith("pm_") and default_pm != "pm_card_visa"
    cards = await vendor.client.v1.customers.payment_methods.list_async(customer.id, params={"type": "card"})
    assert [(pm.id, present(pm.card).brand, present(pm.card).last4) for pm in cards.data] == [
        (default_pm, "visa", "4242")
    ]
    sub = await vendor.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": price.id}], "expand": ["latest_invoice"]}
    )
    assert sub.status == "active"
    latest_invoice = expanded(sub.latest_invoice)
    assert latest_invoice.status == "paid" and latest_invoice.amount_paid == 1500


async def test_declining_card_cannot_be_attached(vendor: Vendor) -> None:
    with pytest.raises(stripe.CardError) as info:
        await vendor.client.v1.customers.create_async(params={"payment_method": "pm_card_chargeDeclined"})
    assert info.value.code == "card_declined"


async def test_card_that_fails_after_attaching_leaves_subscription_incomplete(vendor: Vendor) -> None:
    price = await recurring_price(vendor)
    customer = await vendor.client.v1.customers.create_async(
        params={
            "payment_method": "pm_card_chargeCustomerFail",
            "invoice_settings": {"default_payment_method": "pm_card_chargeCustomerFail"},
        }
    )
    sub = await vendor.client.v1.subscriptions.create_async(
        params={
            "customer": customer.id,
            "items": [{"price": price.id}],
            "payment_behavior": "allow_incomplete",
        }
    )
    assert sub.status == "incomplete"
    assert sub.latest_invoice is not None
    invoice_id = sub.latest_invoice if isinstance(sub.latest_invoice, str) else sub.latest_invoice.id
    with pytest.raises(stripe.CardError):
        await vendor.client.v1.subscriptions.create_async(
            params={
                "customer": customer.id,
                "items": [{"price": price.id}],
                "payment_behavior": "error_if_incomplete",
            }
        )
    listed = await vendor.client.v1.subscriptions.list_async(
        params={"customer": customer.id, "status": "all"}
    )
    assert [s.id for s in listed.data] == [sub.id]  # error_if_incomplete made no subscription
    paid = await vendor.client.v1.invoices.pay_async(invoice_id, params={"payment_method": "pm_card_visa"})
    assert paid.status == "paid"
    assert (await vendor.client.v1.subscriptions.retrieve_async(sub.id)).status == "active"


async def test_dispute_card_is_charged_then_disputed(vendor: Vendor) -> None:
    customer = await vendor.client.v1.customers.create_async(
        params={
            "payment_method": "pm_card_createDispute",
            "invoice_settings": {"default_payment_method": "pm_card_createDispute"},
        }
    )
    price = await recurring_price(vendor)
    sub = await vendor.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": price.id}]}
    )
    assert sub.status == "active"
    [charge] = (await vendor.client.v1.charges.list_async(params={"customer": customer.id})).data
    assert charge.status == "succeeded"

    async def disputed() -> Any:
        return (await vendor.client.v1.disputes.list_async(params={"charge": charge.id})).data

    [dispute] = await until(disputed)
    assert dispute.amount == 1500


# Test clocks and trials -----------------------------------------------------------------------


async def test_trial_ends_into_a_paid_period_on_a_test_clock(vendor: Vendor, clock: Clock) -> None:
    start = clock.frozen_time
    price = await recurring_price(vendor)
    customer = await vendor.client.v1.customers.create_async(
        params={
            "test_clock": clock.id,
            "payment_method": "pm_card_visa",
            "invoice_settings": {"default_payment_method": "pm_card_visa"},
        }
    )
    assert customer.test_clock == clock.id and customer.created == start
    sub = await vendor.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": price.id}], "trial_period_days": 7}
    )
    assert sub.status == "trialing" and sub.trial_start == start and sub.trial_end == start + 7 * DAY
    first = await vendor.client.v1.invoices.retrieve_async(str(sub.latest_invoice))
    assert first.amount_due == 0 and first.status == "paid"

    await advance(vendor, clock.id, start + 5 * DAY)
    assert (await vendor.client.v1.subscriptions.retrieve_async(sub.id)).status == "trialing"
    warned = await vendor.client.v1.events.list_async(
        params={"type": "customer.subscription.trial_will_end", "limit": 100}
    )
    assert sub.id in {e.data.object.id for e in warned.data}

    await advance(vendor, clock.id, start + 8 * DAY)
    after = await vendor.client.v1.subscriptions.retrieve_async(sub.id)
    assert after.status == "active"
    assert after["items"].data[0].current_period_start == start + 7 * DAY
    invoices = await vendor.client.v1.invoices.list_async(params={"customer": customer.id})
    assert [(i.amount_paid, i.status) for i in invoices.data] == [(1500, "paid"), (0, "paid")]


async def test_trial_without_a_card_is_canceled_when_told_so(vendor: Vendor, clock: Clock) -> None:
    price = await recurring_price(vendor)
    customer = await vendor.client.v1.customers.create_async(params={"test_clock": clock.id})
    sub = await vendor.client.v1.subscriptions.create_async(
        params={
            "customer": customer.id,
            "items": [{"price": price.id}],
            "trial_period_days": 3,
            "trial_settings": {"end_behavior": {"missing_payment_method": "cancel"}},
        }
    )
    assert sub.status == "trialing"
    await advance(vendor, clock.id, clock.frozen_time + 4 * DAY)
    assert (await vendor.client.v1.subscriptions.retrieve_async(sub.id)).status == "canceled"


async def test_renewals_follow_the_customers_test_clock(vendor: Vendor, clock: Clock) -> None:
    price = await recurring_price(vendor, interval="week")
    customer = await vendor.client.v1.customers.create_async(
        params={
            "test_clock": clock.id,
            "payment_method": "pm_card_visa",
            "invoice_settings": {"default_payment_method": "pm_card_visa"},
        }
    )
    sub = await vendor.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": price.id}]}
    )
    await advance(vendor, clock.id, clock.frozen_time + 15 * DAY)
    invoices = await vendor.client.v1.invoices.list_async(params={"subscription": sub.id})
    assert [i.billing_reason for i in invoices.data] == [
        "subscription_cycle",
        "subscription_cycle",
        "subscription_create",
    ]
    assert all(i.status == "paid" for i in invoices.data)
    listed = await vendor.client.v1.customers.list_async(params={"test_clock": clock.id})
    assert [c.id for c in listed.data] == [customer.id]


async def test_checkout_accepts_a_trial(vendor: Vendor) -> None:
    env = vendor.sandbox()  # paying a Checkout session needs a browser on Stripe
    price = await recurring_price(vendor)
    session = await env.client.v1.checkout.sessions.create_async(
        params={
            "mode": "subscription",
            "line_items": [{"price": price.id, "quantity": 1}],
            "success_url": "https://app.example/ok",
            "subscription_data": {"trial_period_days": 14},
        }
    )
    await env.raw(f"/v1/test_helpers/checkout/sessions/{session.id}/pay", card_number="4242424242424242")
    paid = await env.client.v1.checkout.sessions.retrieve_async(
        session.id, params={"expand": ["subscription"]}
    )
    subscription = expanded(paid.subscription)
    assert subscription.status == "trialing"
    assert present(subscription.trial_end) - present(subscription.trial_start) == 14 * DAY


# Payment intents and 3-D Secure ---------------------------------------------------------------

NO_REDIRECTS: PaymentIntentCreateParamsAutomaticPaymentMethods = {"enabled": True, "allow_redirects": "never"}


async def test_payment_intent_confirmed_with_test_cards(vendor: Vendor) -> None:
    paid = await vendor.client.v1.payment_intents.create_async(
        params={
            "amount": 2000,
            "currency": "usd",
            "payment_method": "pm_card_visa",
            "confirm": True,
            "automatic_payment_methods": NO_REDIRECTS,
        }
    )
    assert paid.status == "succeeded" and paid.amount_received == 2000
    with pytest.raises(stripe.CardError) as info:
        await vendor.client.v1.payment_intents.create_async(
            params={
                "amount": 2000,
                "currency": "usd",
                "payment_method": "pm_card_chargeDeclinedInsufficientFunds",
                "confirm": True,
                "automatic_payment_methods": NO_REDIRECTS,
            }
        )
    assert info.value.code == "card_declined"
    failed = info.value.error.payment_intent if info.value.error else None
    assert failed is not None and failed.status == "requires_payment_method"
    later = await vendor.client.v1.payment_intents.create_async(
        params={"amount": 700, "currency": "usd", "automatic_payment_methods": NO_REDIRECTS}
    )
    assert later.status == "requires_payment_method"
    confirmed = await vendor.client.v1.payment_intents.confirm_async(
        later.id, params={"payment_method": "pm_card_mastercard"}
    )
    assert confirmed.status == "succeeded"


async def _challenge(vendor: Vendor, url: str, action: str) -> httpx.Response:
    """What the cardholder does on the 3-D Secure page (the sandbox's; Stripe's needs a browser)."""
    vendor.sandbox()
    async with httpx.AsyncClient() as browser:
        shown = await browser.get(url)
        assert shown.status_code == 200 and "Complete" in shown.text
        return await browser.post(url, data={"action": action})


def redirect_url(intent: stripe.PaymentIntent) -> str:
    """Where a payment intent that requires action sends the cardholder."""
    return present(present(present(intent.next_action).redirect_to_url).url)


async def test_three_d_secure_card_asks_for_a_challenge(vendor: Vendor) -> None:
    params: PaymentIntentCreateParams = {
        "amount": 2500,
        "currency": "usd",
        "payment_method": "pm_card_authenticationRequired",
        "confirm": True,
        "return_url": "https://app.example/return",
    }
    pi = await vendor.client.v1.payment_intents.create_async(params=params)
    assert pi.status == "requires_action"
    assert pi.next_action is not None and pi.next_action.type == "redirect_to_url"
    vendor.sandbox()
    done = await _challenge(vendor, redirect_url(pi), "complete")
    assert done.status_code == 303
    assert done.headers["location"].startswith("https://app.example/return?payment_intent=" + pi.id)
    assert "redirect_status=succeeded" in done.headers["location"]
    assert (await vendor.client.v1.payment_intents.retrieve_async(pi.id)).status == "succeeded"
    refused = await vendor.client.v1.payment_intents.create_async(params=params)
    await _challenge(vendor, redirect_url(refused), "fail")
    after = await vendor.client.v1.payment_intents.retrieve_async(refused.id)
    assert after.status == "requires_payment_method"
    assert present(after.last_payment_error).code == "payment_intent_authentication_failure"


async def test_subscription_with_a_three_d_secure_card_waits_for_the_customer(vendor: Vendor) -> None:
    price = await recurring_price(vendor)
    customer = await vendor.client.v1.customers.create_async(
        params={
            "payment_method": "pm_card_authenticationRequired",
            "invoice_settings": {"default_payment_method": "pm_card_authenticationRequired"},
        }
    )
    sub = await vendor.client.v1.subscriptions.create_async(
        params={
            "customer": customer.id,
            "items": [{"price": price.id}],
            "payment_behavior": "allow_incomplete",
        }
    )
    assert sub.status == "incomplete"
    vendor.sandbox()
    [pi] = (await vendor.client.v1.payment_intents.list_async(params={"customer": customer.id})).data
    assert pi.status == "requires_action"
    await _challenge(vendor, redirect_url(pi), "complete")
    assert (await vendor.client.v1.subscriptions.retrieve_async(sub.id)).status == "active"


# Events as Stripe sends them ------------------------------------------------------------------


async def _events_about(vendor: Vendor, type_: str, object_id: str) -> list[Any]:
    async def found() -> list[Any]:
        page = await vendor.client.v1.events.list_async(params={"type": type_, "limit": 100})
        return [e for e in page.data if e.data.object.id == object_id]

    result: list[Any] = await until(found)
    return result


async def test_creation_events_carry_the_object_as_created(vendor: Vendor) -> None:
    price = await recurring_price(vendor)
    customer = await vendor.client.v1.customers.create_async(
        params={
            "payment_method": "pm_card_visa",
            "invoice_settings": {"default_payment_method": "pm_card_visa"},
        }
    )
    pm_id = present(customer.invoice_settings).default_payment_method
    [attached] = await _events_about(vendor, "payment_method.attached", str(pm_id))
    assert attached.data.object.customer == customer.id
    sub = await vendor.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": price.id}]}
    )
    [created] = await _events_about(vendor, "customer.subscription.created", sub.id)
    assert created.data.object.status == "incomplete"
    [activated] = await _events_about(vendor, "customer.subscription.updated", sub.id)
    assert activated.data.object.status == "active"
    assert activated.data.previous_attributes.status == "incomplete"
    [charge] = (await vendor.client.v1.charges.list_async(params={"customer": customer.id})).data
    [pi_created] = await _events_about(vendor, "payment_intent.created", str(charge.payment_intent))
    assert pi_created.data.object.status != "succeeded"
    [pi_succeeded] = await _events_about(vendor, "payment_intent.succeeded", str(charge.payment_intent))
    assert pi_succeeded.data.object.status == "succeeded"


async def test_delivery_order_varies_unless_fixed(vendor: Vendor) -> None:
    vendor.sandbox()
    for ordered in (False, True):
        receiver = Receiver()
        async with sandbox_env(receiver, webhook_ordered=ordered, adversarial_seed=3) as env:
            price = await recurring_price(Vendor(env.client, env))
            customer = await env.client.v1.customers.create_async(
                params={
                    "payment_method": "pm_card_visa",
                    "invoice_settings": {"default_payment_method": "pm_card_visa"},
                }
            )
            before = {e.id async for e in (await env.client.v1.events.list_async()).auto_paging_iter()}
            # One request, about ten events: the subscription, its invoice and its payment.
            await env.client.v1.subscriptions.create_async(
                params={"customer": customer.id, "items": [{"price": price.id}]}
            )
            listed = [e async for e in (await env.client.v1.events.list_async()).auto_paging_iter()]
            emitted = [e.id for e in reversed(listed) if e.id not in before]
            assert len(emitted) >= 8
            wanted = set(emitted)

            def all_delivered(r: Receiver, wanted: set[str] = wanted) -> bool:
                return wanted <= {e.id for e in r.events}

            await receiver.wait_for(all_delivered)
            delivered = [e.id for e in receiver.events if e.id in wanted]
            assert sorted(delivered) == sorted(emitted)
            assert (delivered == emitted) is ordered


# Plan changes ---------------------------------------------------------------------------------


def prorated(amount: int, left: int, whole: int) -> int:
    return round(amount * left / whole)


def is_proration(line: stripe.InvoiceLineItem) -> bool:
    return present(present(line.parent).subscription_item_details).proration


async def test_upgrade_prorates_onto_the_next_invoice(vendor: Vendor, clock: Clock) -> None:
    basic = await recurring_price(vendor, amount=1000)
    premium = await recurring_price(vendor, amount=3000)
    customer = await vendor.client.v1.customers.create_async(
        params={
            "test_clock": clock.id,
            "payment_method": "pm_card_visa",
            "invoice_settings": {"default_payment_method": "pm_card_visa"},
        }
    )
    sub = await vendor.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": basic.id}]}
    )
    item = sub["items"].data[0]
    start, end = item.current_period_start, item.current_period_end
    at = start + 10 * DAY
    await advance(vendor, clock.id, at)
    # The same change previewed, then made (the two parameters' types differ, not their contents).
    preview = await vendor.client.v1.invoices.create_preview_async(
        params={
            "customer": customer.id,
            "subscription": sub.id,
            "subscription_details": {"items": [{"id": item.id, "price": premium.id}], "proration_date": at},
        }
    )
    left, whole = end - at, end - start
    credit, charge = -prorated(1000, left, whole), prorated(3000, left, whole)
    prorations = [line.amount for line in preview.lines.data if is_proration(line)]
    assert sorted(prorations) == [credit, charge]
    assert preview.amount_due == credit + charge + 3000
    updated = await vendor.client.v1.subscriptions.update_async(
        sub.id, params={"items": [{"id": item.id, "price": premium.id}], "proration_date": at}
    )
    assert updated["items"].data[0].price.id == premium.id and updated["items"].data[0].id == item.id
    await advance(vendor, clock.id, end + DAY)
    [renewal, _first] = (await vendor.client.v1.invoices.list_async(params={"subscription": sub.id})).data
    assert renewal.amount_paid == credit + charge + 3000 and renewal.status == "paid"


async def test_downgrade_invoiced_at_once_is_a_credit(vendor: Vendor, clock: Clock) -> None:
    basic = await recurring_price(vendor, amount=1000)
    premium = await recurring_price(vendor, amount=3000)
    customer = await vendor.client.v1.customers.create_async(
        params={
            "test_clock": clock.id,
            "payment_method": "pm_card_visa",
            "invoice_settings": {"default_payment_method": "pm_card_visa"},
        }
    )
    sub = await vendor.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": premium.id}]}
    )
    item = sub["items"].data[0]
    updated = await vendor.client.v1.subscriptions.update_async(
        sub.id,
        params={
            "items": [{"id": item.id, "price": basic.id}],
            "proration_behavior": "always_invoice",
            "expand": ["latest_invoice"],
        },
    )
    invoice = expanded(updated.latest_invoice)
    assert invoice.billing_reason == "subscription_update" and invoice.amount_due == 0
    assert sum(line.amount for line in invoice.lines.data) < 0
    items = await vendor.client.v1.subscription_items.list_async(params={"subscription": sub.id})
    assert [(i.id, i.price.id) for i in items.data] == [(item.id, basic.id)]
    with pytest.raises(stripe.InvalidRequestError) as info:
        await vendor.client.v1.subscriptions.update_async(
            sub.id, params={"items": [{"id": "si_missing", "price": premium.id}]}
        )
    assert info.value.param == "items[0][id]"


# Billing portal -------------------------------------------------------------------------------


async def _subscribed_with_card(
    vendor: Vendor, amount: int = 1000
) -> tuple[stripe.Customer, stripe.Subscription]:
    price = await recurring_price(vendor, amount=amount)
    customer = await vendor.client.v1.customers.create_async(
        params={
            "email": f"{vendor.tag()}@example.com",
            "payment_method": "pm_card_visa",
            "invoice_settings": {"default_payment_method": "pm_card_visa"},
        }
    )
    sub = await vendor.client.v1.subscriptions.create_async(
        params={"customer": customer.id, "items": [{"price": price.id}]}
    )
    return customer, sub


async def test_portal_switches_plans_and_cards(vendor: Vendor) -> None:
    vendor.sandbox()  # the portal's pages need a browser on Stripe
    customer, sub = await _subscribed_with_card(vendor)
    premium = await recurring_price(vendor, amount=3000)
    portal = await vendor.client.v1.billing_portal.sessions.create_async(
        params={"customer": customer.id, "return_url": "https://app.example/account"}
    )
    async with httpx.AsyncClient() as browser:
        home = await browser.get(portal.url)
        assert "Update plan" in home.text and "visa •••• 4242" in home.text
        update_url = f"{portal.url}/subscriptions/{sub.id}/update"
        assert premium.id in (await browser.get(update_url)).text
        switched = await browser.post(update_url, data={"price": premium.id})
        assert switched.status_code == 303 and switched.headers["location"] == urlsplit(portal.url).path
        saved = await browser.post(
            f"{portal.url}/payment-method",
            data={
                "cardNumber": "5555 5555 5555 4444",
                "cardExpiry": "12 / 40",
                "cardCvc": "123",
                "billingName": "A",
            },
        )
        assert saved.status_code == 303
        refused = await browser.post(
            f"{portal.url}/payment-method",
            data={
                "cardNumber": "4000000000000002",
                "cardExpiry": "12/40",
                "cardCvc": "123",
                "billingName": "A",
            },
        )
        assert refused.status_code == 402 and "declined" in refused.text
    after = await vendor.client.v1.subscriptions.retrieve_async(sub.id)
    assert after["items"].data[0].price.id == premium.id
    preview = await vendor.client.v1.invoices.create_preview_async(params={"subscription": sub.id})
    assert any(is_proration(line) for line in preview.lines.data)
    customer_now = await vendor.client.v1.customers.retrieve_async(customer.id)
    card = await vendor.client.v1.payment_methods.retrieve_async(
        str(present(customer_now.invoice_settings).default_payment_method)
    )
    assert present(card.card).brand == "mastercard" and after.default_payment_method == card.id


async def test_portal_flow_data_deep_links(vendor: Vendor) -> None:
    vendor.sandbox()
    customer, sub = await _subscribed_with_card(vendor)
    sessions = vendor.client.v1.billing_portal.sessions
    cancel = await sessions.create_async(
        params={
            "customer": customer.id,
            "flow_data": {
                "type": "subscription_cancel",
                "subscription_cancel": {"subscription": sub.id},
                "after_completion": {
                    "type": "redirect",
                    "redirect": {"return_url": "https://app.example/bye"},
                },
            },
        }
    )
    assert cancel.flow is not None and cancel.flow.type == "subscription_cancel"
    assert present(cancel.flow.subscription_cancel).subscription == sub.id
    async with httpx.AsyncClient() as browser:
        page = await browser.get(cancel.url)
        assert page.status_code == 200 and "confirm-cancel" in page.text
        action = page.text.split('action="')[1].split('"')[0]
        done = await browser.post(urljoin(cancel.url, action))
        assert done.status_code == 303 and done.headers["location"] == "https://app.example/bye"
        assert (await vendor.client.v1.subscriptions.retrieve_async(sub.id)).cancel_at_period_end is True
        flows: list[tuple[SessionCreateParamsFlowData, str]] = [
            ({"type": "subscription_update", "subscription_update": {"subscription": sub.id}}, "/update"),
            ({"type": "payment_method_update"}, "/payment-method"),
        ]
        for flow_data, lands_on in flows:
            session = await sessions.create_async(params={"customer": customer.id, "flow_data": flow_data})
            landed = await browser.get(session.url)
            assert landed.status_code == 303 and landed.headers["location"].endswith(lands_on)
    with pytest.raises(stripe.InvalidRequestError):
        await sessions.create_async(
            params={
                "customer": customer.id,
                "flow_data": {
                    "type": "subscription_update",
                    "subscription_update": {"subscription": "sub_missing"},
                },
            }
        )


# The payment trail ----------------------------------------------------------------------------


async def test_charges_have_balance_transactions_receipts_and_invoice_pages(vendor: Vendor) -> None:
    customer, sub = await _subscribed_with_card(vendor, amount=1500)
    [charge] = (await vendor.client.v1.charges.list_async(params={"customer": customer.id})).data
    txn = await vendor.client.v1.balance_transactions.retrieve_async(str(charge.balance_transaction))
    assert (txn.type, txn.amount, txn.source) == ("charge", 1500, charge.id)
    assert txn.fee > 0 and txn.net == txn.amount - txn.fee
    invoice = await vendor.client.v1.invoices.retrieve_async(str(sub.latest_invoice))
    assert charge.receipt_url and invoice.hosted_invoice_url
    refund = await vendor.client.v1.refunds.create_async(params={"charge": charge.id, "amount": 500})
    refund_txn = await vendor.client.v1.balance_transactions.retrieve_async(str(refund.balance_transaction))
    assert (refund_txn.type, refund_txn.amount) == ("refund", -500)
    vendor.sandbox()  # Stripe's pages are Stripe's; the sandbox's must render
    async with httpx.AsyncClient() as browser:
        receipt = await browser.get(charge.receipt_url)
        assert receipt.status_code == 200 and "15.00" in receipt.text and "4242" in receipt.text
        page = await browser.get(invoice.hosted_invoice_url)
        assert page.status_code == 200 and str(invoice.number) in page.text and "paid" in page.text
        assert (await browser.get(charge.receipt_url + "x")).status_code == 404


async def test_disputes_take_evidence_and_close(vendor: Vendor) -> None:
    async def disputed_customer() -> Any:
        customer = await vendor.client.v1.customers.create_async(
            params={
                "payment_method": "pm_card_createDispute",
                "invoice_settings": {"default_payment_method": "pm_card_createDispute"},
            }
        )
        price = await recurring_price(vendor)
        await vendor.client.v1.subscriptions.create_async(
            params={"customer": customer.id, "items": [{"price": price.id}]}
        )
        [charge] = (await vendor.client.v1.charges.list_async(params={"customer": customer.id})).data

        async def found() -> Any:
            return (await vendor.client.v1.disputes.list_async(params={"charge": charge.id})).data

        return (await until(found))[0]

    dispute = await disputed_customer()
    assert dispute.status == "needs_response"
    await vendor.client.v1.disputes.update_async(
        dispute.id, params={"evidence": {"uncategorized_text": "winning_evidence"}, "submit": True}
    )

    async def won() -> bool:
        return (await vendor.client.v1.disputes.retrieve_async(dispute.id)).status == "won"

    await until(won)
    other = await disputed_customer()
    closed = await vendor.client.v1.disputes.close_async(other.id)
    assert closed.status == "lost"


async def test_prices_and_products_search(vendor: Vendor) -> None:
    tag = vendor.tag()
    product = await vendor.client.v1.products.create_async(params={"name": f"Search {tag}"})
    price = await vendor.client.v1.prices.create_async(
        params={
            "product": product.id,
            "currency": "usd",
            "unit_amount": 900,
            "recurring": {"interval": "month"},
            "lookup_key": f"search_{tag}",
        }
    )

    async def found_price() -> list[Any]:
        result = await vendor.client.v1.prices.search_async(params={"query": f"lookup_key:'search_{tag}'"})
        return list(result.data)

    assert [p.id for p in await until(found_price)] == [price.id]

    async def found_product() -> list[Any]:
        query = f"active:'true' AND name:'Search {tag}'"
        return list((await vendor.client.v1.products.search_async(params={"query": query})).data)

    assert [p.id for p in await until(found_product)] == [product.id]


async def test_other_api_versions_are_refused(vendor: Vendor) -> None:
    env = vendor.sandbox()  # Stripe would answer in the older version's shapes
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.customers.list_async(options={"stripe_version": "2020-08-27"})
    assert "2020-08-27" in str(info.value.user_message)
    assert (await env.client.v1.customers.list_async()).object == "list"  # type: ignore[attr-defined]  # not in ListObject's types


async def test_rate_limit_mode_answers_429(vendor: Vendor) -> None:
    vendor.sandbox()
    async with sandbox_env(Receiver(), rate_limit=True, rate_limit_per_second=1) as env:

        async def burst() -> None:
            for _ in range(10):
                await env.client.v1.customers.list_async()

        with pytest.raises(stripe.RateLimitError) as info:
            await burst()
        assert info.value.http_status == 429
        assert error_json(info.value)["code"] == "rate_limit"


async def test_oversized_page_forms_change_nothing(vendor: Vendor) -> None:
    vendor.sandbox()
    pi = await vendor.client.v1.payment_intents.create_async(
        params={
            "amount": 2500,
            "currency": "usd",
            "payment_method": "pm_card_authenticationRequired",
            "confirm": True,
            "return_url": "https://app.example/return",
        }
    )
    async with httpx.AsyncClient() as browser:
        answer = await browser.post(redirect_url(pi), data={"action": "complete", "padding": "x" * 10_000})
    assert answer.status_code == 400
    assert (await vendor.client.v1.payment_intents.retrieve_async(pi.id)).status == "requires_action"


async def test_checkout_shows_a_three_d_secure_challenge(vendor: Vendor) -> None:
    env = vendor.sandbox()  # Stripe's Checkout page needs a browser
    price = await recurring_price(vendor)
    session = await env.client.v1.checkout.sessions.create_async(
        params={
            "mode": "subscription",
            "line_items": [{"price": price.id, "quantity": 1}],
            "success_url": "https://app.example/ok",
            "customer_email": "ada@example.com",
        }
    )
    card = {
        "email": "ada@example.com",
        "cardNumber": "4000 0025 0000 3155",
        "cardExpiry": "12 / 40",
        "cardCvc": "123",
        "billingName": "Ada",
    }
    checkout_url = present(session.url)
    async with httpx.AsyncClient() as browser:
        challenge = await browser.post(checkout_url, data=card)
        assert challenge.status_code == 200 and "complete-authentication" in challenge.text
        action = challenge.text.split('action="')[1].split('"')[0]
        failed = await browser.post(urljoin(checkout_url, action), data={"action": "fail"})
        assert failed.status_code == 402 and "payment_intent_authentication_failure" in failed.text
        assert (await env.client.v1.checkout.sessions.retrieve_async(session.id)).status == "open"
        again = await browser.post(checkout_url, data=card)
        action = again.text.split('action="')[1].split('"')[0]
        passed = await browser.post(urljoin(checkout_url, action), data={"action": "complete"})
        assert passed.status_code == 303 and passed.headers["location"] == "https://app.example/ok"
    done = await env.client.v1.checkout.sessions.retrieve_async(
        session.id, params={"expand": ["subscription"]}
    )
    assert done.status == "complete" and expanded(done.subscription).status == "active"
    other = await env.client.v1.checkout.sessions.create_async(
        params={"mode": "subscription", "line_items": [{"price": price.id, "quantity": 1}]}
    )
    with pytest.raises(stripe.CardError) as info:
        await env.raw(
            f"/v1/test_helpers/checkout/sessions/{other.id}/pay",
            card_number="4000002500003155",
            three_d_secure="fail",
        )
    assert info.value.code == "payment_intent_authentication_failure"


# Usage-based billing -----------------------------------------------------------------------------


async def test_meter_events_are_deduplicated_and_summarised(vendor: Vendor) -> None:
    meters = vendor.client.v1.billing.meters
    event_name = f"calls_{vendor.tag()}"
    meter = await meters.create_async(
        params={"display_name": "Calls", "event_name": event_name, "default_aggregation": {"formula": "sum"}}
    )
    try:
        customer = await vendor.client.v1.customers.create_async(
            params={"email": f"{event_name}@example.com"}
        )
        identifier = f"{event_name}-1"
        first = await vendor.client.v1.billing.meter_events.create_async(
            params={
                "event_name": event_name,
                "payload": {"stripe_customer_id": customer.id, "value": "3"},
                "identifier": identifier,
            }
        )
        assert (first.identifier, first.payload["value"]) == (identifier, "3")
        with pytest.raises(stripe.InvalidRequestError) as duplicate:
            await vendor.client.v1.billing.meter_events.create_async(
                params={
                    "event_name": event_name,
                    "payload": {"stripe_customer_id": customer.id, "value": "3"},
                    "identifier": identifier,
                }
            )
        assert "already exists with identifier" in str(duplicate.value.user_message)
        await vendor.client.v1.billing.meter_events.create_async(
            params={"event_name": event_name, "payload": {"stripe_customer_id": customer.id, "value": "4"}}
        )
        start = first.timestamp - first.timestamp % 3600
        window: MeterEventSummaryListParams = {
            "customer": customer.id,
            "start_time": start,
            "end_time": start + 2 * 3600,
        }

        async def summed() -> bool:
            page = await meters.event_summaries.list_async(meter.id, params=window)
            return [s.aggregated_value for s in page.data] == [7]

        await until(summed)
    finally:
        await meters.deactivate_async(meter.id)  # meters cannot be deleted; this one takes no more events
