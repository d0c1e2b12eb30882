"""Pay on the hosted checkout page with each test card, in a real browser.

Selectors are those of Stripe Checkout (`#email`, `#cardNumber`, `#cardExpiry`, `#cardCvc`,
`#billingName`, one submit button), so this script would also drive checkout.stripe.com.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from tests.integration.stripe_sandbox.conftest import Env, catalog
from tests.support.browser import fill_stripe_checkout
from tests.support.stripe_objects import expanded, unexpanded

pytestmark = pytest.mark.browser

TIMEOUT_MS = 10_000


async def _session(env: Env, shop: str) -> Any:
    _product, price = await catalog(env)
    customer = await env.client.v1.customers.create_async(params={"email": "ada@example.com"})
    return await env.client.v1.checkout.sessions.create_async(
        params={
            "mode": "subscription",
            "customer": customer.id,
            "line_items": [{"price": price.id, "quantity": 1}],
            "success_url": f"{shop}/ok?session_id={{CHECKOUT_SESSION_ID}}",
            "cancel_url": f"{shop}/cancel",
        }
    )


async def _open(browser: Browser, url: str, allowed: tuple[str, ...]) -> Page:
    page = await browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    foreign: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(allowed) else foreign.append(r.url))
    response = await page.goto(url)
    assert response is not None
    csp = await response.header_value("content-security-policy")
    assert csp is not None and "default-src 'none'" in csp
    page.foreign_requests = foreign  # type: ignore[attr-defined]
    return page


async def _pay(page: Page, card: str) -> None:
    await expect(page.locator("#email")).to_have_value("ada@example.com")
    await fill_stripe_checkout(page, card)


async def test_successful_card_redirects_and_subscribes(browser: Browser, env: Env, shop: str) -> None:
    session = await _session(env, shop)
    page = await _open(browser, session.url, (env.base_url, shop))
    await _pay(page, "4242 4242 4242 4242")
    await page.wait_for_url(f"{shop}/ok?session_id={session.id}")
    done = await env.client.v1.checkout.sessions.retrieve_async(
        session.id, params={"expand": ["subscription"]}
    )
    assert (done.status, done.payment_status) == ("complete", "paid")
    assert expanded(done.subscription).status == "active"
    assert page.foreign_requests == []  # type: ignore[attr-defined]
    await page.close()


@pytest.mark.parametrize(
    ("card", "message"),
    [
        ("4000 0000 0000 0002", "Your card was declined."),
        ("4000 0000 0000 9995", "Your card has insufficient funds."),
    ],
)
async def test_declined_cards_show_error_and_create_nothing(
    browser: Browser, env: Env, shop: str, card: str, message: str
) -> None:
    session = await _session(env, shop)
    page = await _open(browser, session.url, (env.base_url, shop))
    await _pay(page, card)
    await expect(page.get_by_role("alert")).to_have_text(message)
    assert page.url == session.url
    again = await env.client.v1.checkout.sessions.retrieve_async(session.id)
    assert (again.status, again.subscription) == ("open", None)
    assert (await env.client.v1.subscriptions.list_async(params={"status": "all"})).data == []
    await page.close()


async def test_cancel_link_goes_to_cancel_url(browser: Browser, env: Env, shop: str) -> None:
    session = await _session(env, shop)
    page = await _open(browser, session.url, (env.base_url, shop))
    await page.click(f'a[href="{shop}/cancel"]')
    await page.wait_for_url(f"{shop}/cancel")
    assert (await env.client.v1.checkout.sessions.retrieve_async(session.id)).status == "open"
    await page.close()


async def test_portal_cancel_at_period_end_and_resume(browser: Browser, env: Env, shop: str) -> None:
    session = await _session(env, shop)
    await env.raw(f"/v1/test_helpers/checkout/sessions/{session.id}/pay", card_number="4242424242424242")
    done = await env.client.v1.checkout.sessions.retrieve_async(session.id)
    portal = await env.client.v1.billing_portal.sessions.create_async(
        params={"customer": unexpanded(done.customer), "return_url": f"{shop}/account"}
    )
    page = await _open(browser, portal.url, (env.base_url, shop))
    subscription_id = unexpanded(done.subscription)
    await page.click("[data-testid=cancel-subscription]")
    await expect(page.locator("[data-testid=cancels-on]")).to_be_visible()
    assert (await env.client.v1.subscriptions.retrieve_async(subscription_id)).cancel_at_period_end is True
    await page.click("[data-testid=renew-subscription]")
    await expect(page.locator("[data-testid=cancel-subscription]")).to_be_visible()
    assert (await env.client.v1.subscriptions.retrieve_async(subscription_id)).cancel_at_period_end is False
    await page.click("[data-testid=return-link]")
    await page.wait_for_url(f"{shop}/account")
    await env.sandbox.deliver_pending()
    assert env.receiver.types().count("customer.subscription.updated") == 3  # activation, cancel, resume
    await page.close()
