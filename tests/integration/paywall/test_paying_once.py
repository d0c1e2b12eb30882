"""Nobody pays twice: the pay button after a payment, an upgrade, and a flood of presses.

Checkout Sessions are counted in the sandbox through stripe-python, and Stripe calls through the
sandbox's own request log: what reached "Stripe", not what our code meant to do.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import httpx

from service.audit.models import AuditEvent
from service.billing.models import Subscription
from service.identity.models import User
from tests.support import factories
from tests.support.browserless import csrf_token, log_in_through_form
from tests.support.payment import checkout_session_id, pay_checkout_session
from tests.support.service import DEFAULT_PASSWORD, RunningService, run_service
from tests.support.subscriptions import subscribe


async def link_path(service: RunningService, username: str, tool: str) -> str:
    """The path of the user's payment page for `tool`, as an unpaid call opens it."""
    [user] = await service.rows(User, username=username)
    return urlsplit(await factories.payment_link(service, user, tool=tool)).path


async def press_pay(browser: httpx.AsyncClient, path: str) -> httpx.Response:
    """Open the payment page and press its button, as a signed-in browser does."""
    page = await browser.get(path)
    assert page.status_code == 200, page.text
    return await browser.post(path, data={"csrf_token": csrf_token(page.text)})


async def checkout_sessions(service: RunningService) -> list[str]:
    listed = await service.stripe.v1.checkout.sessions.list_async(params={"limit": 100})
    return [session.id for session in listed.data if session.id is not None]


async def stop_webhooks(service: RunningService) -> None:
    """Stripe keeps the events but delivers none: a payment stays completed-but-unconfirmed."""
    endpoints = await service.stripe.v1.webhook_endpoints.list_async()
    for endpoint in endpoints.data:
        assert endpoint.id is not None
        await service.stripe.v1.webhook_endpoints.update_async(endpoint.id, params={"disabled": True})


async def test_pressing_pay_again_after_paying_waits_for_confirmation(service: RunningService) -> None:
    await service.add_user("pam")
    path = await link_path(service, "pam", "ascii_chart")
    async with service.http() as browser:
        await log_in_through_form(browser, f"/login?next={path}", "pam", DEFAULT_PASSWORD)
        first = await press_pay(browser, path)
        assert first.status_code == 303, first.text
        await stop_webhooks(service)
        await pay_checkout_session(service.stripe, checkout_session_id(first.headers["location"]))
        again = await press_pay(browser, path)
    assert again.status_code == 200, again.text
    assert "Payment received, waiting for confirmation" in again.text
    assert len(await checkout_sessions(service)) == 1, "no second Checkout Session"
    assert await service.rows(Subscription) == [], "the webhook really was held back"


async def test_a_pro_subscriber_asking_for_team_is_sent_to_the_portal(service: RunningService) -> None:
    await subscribe(service, "tia")  # Pro, paid and confirmed
    assert len(await checkout_sessions(service)) == 1
    path = await link_path(service, "tia", "password_audit")
    async with service.http() as browser:
        await log_in_through_form(browser, f"/login?next={path}", "tia", DEFAULT_PASSWORD)
        upgrade = await press_pay(browser, path)
    assert upgrade.status_code == 303, upgrade.text
    assert "/p/session/" in upgrade.headers["location"], "the sandbox's billing portal"
    assert len(await checkout_sessions(service)) == 1, "no Checkout Session for a second subscription"
    subscriptions = await service.stripe.v1.subscriptions.list_async(params={"status": "all"})
    assert len(subscriptions.data) == 1


async def test_a_flood_of_pay_presses_is_refused_before_stripe(database_url: str) -> None:
    async with run_service(database_url, max_pay_attempts_per_elicitation_per_hour=3) as service:
        await service.add_user("flo")
        path = await link_path(service, "flo", "ascii_chart")
        async with service.http() as browser:
            await log_in_through_form(browser, f"/login?next={path}", "flo", DEFAULT_PASSWORD)
            page = await browser.get(path)
            form = {"csrf_token": csrf_token(page.text)}
            allowed = [await browser.post(path, data=form) for _ in range(3)]
            stripe_calls = len(service.sandbox.request_log)
            refused = [await browser.post(path, data=form) for _ in range(20)]
        assert [answer.status_code for answer in allowed] == [303] * 3
        assert {answer.status_code for answer in refused} == {429}
        assert refused[0].headers["retry-after"] == "3600"
        assert len(service.sandbox.request_log) == stripe_calls, "no Stripe call for a refused press"
        assert len(await checkout_sessions(service)) == 1
        # Sampled: a signed-in user can press a refused button as often as they like.
        [limited] = await service.rows(AuditEvent, kind="rate_limited")
        assert json.loads(limited.detail) == {"what": "pay", "count": 1}


async def test_presses_are_also_limited_per_user_across_elicitations(database_url: str) -> None:
    async with run_service(database_url, max_pay_attempts_per_user_per_hour=2) as service:
        await service.add_user("uli")
        chart = await link_path(service, "uli", "ascii_chart")
        audit = await link_path(service, "uli", "password_audit")
        async with service.http() as browser:
            await log_in_through_form(browser, f"/login?next={chart}", "uli", DEFAULT_PASSWORD)
            assert (await press_pay(browser, chart)).status_code == 303
            assert (await press_pay(browser, chart)).status_code == 303
            stripe_calls = len(service.sandbox.request_log)
            other = await press_pay(browser, audit)
        assert other.status_code == 429
        assert len(service.sandbox.request_log) == stripe_calls
