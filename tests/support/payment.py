"""Paying for an elicitation the way a user does, minus the browser: login, payment page, Checkout.

The browser tests drive the same pages in Chromium; these helpers let protocol tests pay quickly.
Card payment goes through the sandbox's test helper, the headless twin of its hosted page.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx
import stripe

from tests.support.browserless import csrf_token, log_in_through_form
from tests.support.service import DEFAULT_PASSWORD


class PaymentSite(Protocol):
    """Where the payment pages are served and which Stripe pays: a service, or one of its replicas."""

    def http(self, **kwargs: Any) -> httpx.AsyncClient: ...

    @property
    def stripe(self) -> stripe.StripeClient: ...


GOOD_CARD = "4242424242424242"
DECLINED_CARD = "4000000000000002"


async def open_checkout(service: PaymentSite, payment_url: str, username: str) -> httpx.Response:
    """Sign in as `username`, open the payment page and press its button; the POST's response."""
    path = urlsplit(payment_url).path
    async with service.http() as browser:
        login = await log_in_through_form(browser, f"/login?next={path}", username, DEFAULT_PASSWORD)
        assert login.status_code == 303, login.text
        page = await browser.get(path)
        if page.status_code != 200 or 'id="pay-button"' not in page.text:
            return page
        return await browser.post(path, data={"csrf_token": csrf_token(page.text)})


def checkout_session_id(checkout_url: str) -> str:
    ids = [part for part in urlsplit(checkout_url).path.split("/") if part.startswith("cs_")]
    assert ids, f"not a Checkout URL: {checkout_url}"
    return ids[0]


async def pay(service: PaymentSite, payment_url: str, username: str, card: str = GOOD_CARD) -> str:
    """The whole payment for an elicitation; returns the Checkout Session id."""
    started = await open_checkout(service, payment_url, username)
    assert started.status_code == 303, started.text
    session_id = checkout_session_id(started.headers["location"])
    await pay_checkout_session(service.stripe, session_id, card)
    return session_id


async def pay_checkout_session(client: stripe.StripeClient, session_id: str, card: str = GOOD_CARD) -> None:
    await client.raw_request_async(
        "post",
        f"/v1/test_helpers/checkout/sessions/{session_id}/pay",
        card_number=card,
        email="buyer@example.com",
    )


async def open_credit_checkout(
    service: PaymentSite, payment_url: str, username: str, pack_id: str
) -> httpx.Response:
    """Sign in as `username`, open the payment page and press the credit pack's button."""
    path = urlsplit(payment_url).path
    async with service.http() as browser:
        login = await log_in_through_form(browser, f"/login?next={path}", username, DEFAULT_PASSWORD)
        assert login.status_code == 303, login.text
        page = await browser.get(path)
        assert f'id="credits-button-{pack_id}"' in page.text, page.text
        return await browser.post(
            f"{path}/credits", data={"csrf_token": csrf_token(page.text), "pack_id": pack_id}
        )


async def buy_credits(
    service: PaymentSite, payment_url: str, username: str, pack_id: str, card: str = GOOD_CARD
) -> str:
    """Buy a credit pack from an elicitation's payment page; returns the Checkout Session id."""
    started = await open_credit_checkout(service, payment_url, username, pack_id)
    assert started.status_code == 303, started.text
    session_id = checkout_session_id(started.headers["location"])
    await pay_checkout_session(service.stripe, session_id, card)
    return session_id


async def pay_for_plan(
    service: PaymentSite, payment_url: str, username: str, plan_id: str, card: str = GOOD_CARD
) -> str:
    """Subscribe to another plan the payment page offers (`plan-button-<id>`); the Checkout Session id."""
    path = urlsplit(payment_url).path
    async with service.http() as browser:
        login = await log_in_through_form(browser, f"/login?next={path}", username, DEFAULT_PASSWORD)
        assert login.status_code == 303, login.text
        page = await browser.get(path)
        assert f'id="plan-button-{plan_id}"' in page.text, page.text
        started = await browser.post(path, data={"csrf_token": csrf_token(page.text), "plan_id": plan_id})
    assert started.status_code == 303, started.text
    session_id = checkout_session_id(started.headers["location"])
    await pay_checkout_session(service.stripe, session_id, card)
    return session_id


async def answer_dispute(client: stripe.StripeClient, charge_id: str, evidence: str) -> None:
    """Answer the charge's dispute with Stripe's test-mode evidence text, which decides it at once
    (`winning_evidence`, `losing_evidence`) or escalates an inquiry (`escalate_inquiry_evidence`)."""
    [dispute] = (await client.v1.disputes.list_async(params={"charge": charge_id})).data
    await client.v1.disputes.update_async(
        dispute.id, params={"evidence": {"uncategorized_text": evidence}, "submit": True}
    )


async def checkout_payment(client: stripe.StripeClient, checkout_id: str) -> tuple[str, str]:
    """The payment intent of a paid Checkout Session in payment mode, and the one charge it made."""
    checkout = await client.v1.checkout.sessions.retrieve_async(checkout_id)
    assert checkout.payment_intent is not None
    payment_intent = str(checkout.payment_intent)
    [charge] = (await client.v1.charges.list_async(params={"payment_intent": payment_intent})).data
    return payment_intent, charge.id
