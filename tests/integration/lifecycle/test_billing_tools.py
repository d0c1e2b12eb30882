"""billing_status and manage_billing: read-only status, and the portal reached through our own sign-in."""

from __future__ import annotations

import logging

import pytest

from service.audit.models import AuditEvent
from service.billing.models import StripeCustomer
from tests.support.browserless import csrf_token, log_in_through_form
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.service import DEFAULT_PASSWORD, RunningService, run_service
from tests.support.stripe_outage import OUTAGES, StripeOutage, service_with_stripe
from tests.support.subscriptions import subscribe


async def test_billing_status_before_and_after_subscribing(service: RunningService) -> None:
    await service.add_user("bo")
    token = (await service.personal_token("bo")).secret
    async with service.mcp_client(token) as client:
        before = await client.call_tool("billing_status", {})
    assert before.structured_content == {
        "subscriptions": [],
        "credits": 0,
        "summary": "No active subscription.",
    }

    subscriber = await subscribe(service, "cy")
    async with service.mcp_client(subscriber.token, mode="legacy") as client:
        after = await client.call_tool("billing_status", {})
    assert after.structured_content is not None
    [status] = after.structured_content["subscriptions"]
    assert status["plan"] == "pro" and status["status"] == "active" and status["has_access"] is True
    assert status["renews_or_ends_at"] is not None
    assert (status["calls_used"], status["calls_included"]) == (0, 1000)
    assert after.structured_content["summary"] == "Active: Pro (0 of 1,000 included calls used this period)."


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_manage_billing_sends_the_user_to_our_billing_page(service: RunningService, mode: str) -> None:
    subscriber = await subscribe(service, f"dee-{mode[:6]}")
    probe = ClientProbe()
    async with probed_client(service.mcp_url, subscriber.token, probe, mode=mode) as client:
        result = await client.call_tool("manage_billing", {})
    assert not result.is_error
    assert [request.url for request in probe.url_requests] == [f"{service.base_url}/billing"]
    assert "billing_status" in result.content[0].text  # type: ignore[union-attr]


async def test_billing_page_opens_the_stripe_portal_for_the_signed_in_user(service: RunningService) -> None:
    subscriber = await subscribe(service, "eli")
    async with service.http() as browser:
        to_login = await browser.get("/billing")
        assert to_login.status_code == 303
        await log_in_through_form(
            browser, to_login.headers["location"], subscriber.username, DEFAULT_PASSWORD
        )
        page = await browser.get("/billing")
        assert page.status_code == 200
        portal = await browser.post("/billing", data={"csrf_token": csrf_token(page.text)})
    assert portal.status_code == 303
    sandbox_base = service.runtime.checkout_domain.split()[0]
    assert sandbox_base in portal.headers["location"]


async def test_billing_page_for_someone_without_a_subscription(service: RunningService) -> None:
    await service.add_user("fox")
    async with service.http() as browser:
        await log_in_through_form(browser, "/login", "fox", DEFAULT_PASSWORD)
        page = await browser.get("/billing")
    assert "No subscription yet" in page.text


async def test_billing_portal_sessions_are_limited_per_user_per_hour(database_url: str) -> None:
    async with run_service(database_url, max_portal_sessions_per_user_per_hour=2) as service:
        subscriber = await subscribe(service, "gus")
        async with service.http() as browser:
            await log_in_through_form(browser, "/login", subscriber.username, DEFAULT_PASSWORD)
            page = await browser.get("/billing")
            portals = [
                await browser.post("/billing", data={"csrf_token": csrf_token(page.text)}) for _ in range(3)
            ]
        assert [portal.status_code for portal in portals] == [303, 303, 429]
        assert portals[2].headers["retry-after"] == "3600"
        [limited] = await service.rows(AuditEvent, kind="rate_limited")
        assert '"what": "billing_portal"' in limited.detail


async def test_a_portal_stripe_refuses_is_an_error_page(
    service: RunningService, caplog: pytest.LogCaptureFixture
) -> None:
    user = await service.add_user("hal")
    async with service.runtime.sessions() as session, session.begin():
        session.add(StripeCustomer(user_id=user.id, customer_id="cus_doesnotexist"))
    async with service.http() as browser:
        await log_in_through_form(browser, "/login", "hal", DEFAULT_PASSWORD)
        page = await browser.get("/billing")
        portal = await browser.post("/billing", data={"csrf_token": csrf_token(page.text)})
    assert portal.status_code == 502, portal.text
    assert portal.headers["content-type"].startswith("text/html")
    assert "Billing portal unavailable" in portal.text
    [warning] = [record for record in caplog.records if record.name == "service.billing.endpoints"]
    assert warning.levelno == logging.WARNING and "InvalidRequestError" in warning.getMessage()


async def test_refused_portal_presses_write_a_bounded_number_of_audit_rows(database_url: str) -> None:
    async with run_service(database_url, max_portal_sessions_per_user_per_hour=1) as service:
        subscriber = await subscribe(service, "ivy")
        async with service.http() as browser:
            await log_in_through_form(browser, "/login", subscriber.username, DEFAULT_PASSWORD)
            page = await browser.get("/billing")
            token = csrf_token(page.text)
            portals = [
                (await browser.post("/billing", data={"csrf_token": token})).status_code for _ in range(30)
            ]
        assert portals == [303] + [429] * 29
        # One row for the first refusal; the rest wait for PAGE_AUDIT_SECONDS to be counted.
        [limited] = await service.rows(AuditEvent, kind="rate_limited")
        assert '"count": 1' in limited.detail and '"what": "billing_portal"' in limited.detail


@pytest.mark.parametrize("outage", OUTAGES)
async def test_a_portal_stripe_throttles_or_cannot_reach_is_a_503_to_retry(
    database_url: str, outage: StripeOutage
) -> None:
    async with service_with_stripe(database_url, outage) as service:
        user = await service.add_user("jo")
        async with service.runtime.sessions() as session, session.begin():
            session.add(StripeCustomer(user_id=user.id, customer_id="cus_anyone"))
        async with service.http() as browser:
            await log_in_through_form(browser, "/login", "jo", DEFAULT_PASSWORD)
            page = await browser.get("/billing")
            portal = await browser.post("/billing", data={"csrf_token": csrf_token(page.text)})
    assert portal.status_code == 503, portal.text
    assert portal.headers["retry-after"] == "5"
    assert "Billing portal unavailable" in portal.text and "try again in a moment" in portal.text
