"""The whole paid-tool flow with the Python SDK client and a real Chromium paying on real pages."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import mcp_types as t
import pytest
from mcp import MCPError, UrlElicitationRequiredError
from playwright.async_api import Browser, Page, expect

from service.audit.models import AuditEvent
from service.billing.models import Subscription
from tests.support.browser import new_page, pay_in_browser
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.service import DEFAULT_PASSWORD, RunningService, run_service

pytestmark = pytest.mark.browser

CARD = "4242424242424242"
CHART_ARGS = {"values": [3, 1, 2], "labels": ["a", "b", "c"]}


async def paid_and_landed(page: Page, service: RunningService, url: str, username: str) -> None:
    await pay_in_browser(page, url, username, DEFAULT_PASSWORD, CARD)
    await page.wait_for_url(f"{url}/success?session_id=cs_*")
    await expect(page.locator("#message")).to_contain_text("Stripe will confirm your payment")


async def test_legacy_32042_flow_in_chromium(service: RunningService, browser: Browser) -> None:
    await service.add_user("ada")
    token = (await service.personal_token("ada")).secret
    probe = ClientProbe()
    page = await new_page(browser)
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("ascii_chart", CHART_ARGS)
        [elicitation] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
        await paid_and_landed(page, service, elicitation.url, "ada")
        assert await probe.wait_for_completion() == elicitation.elicitation_id
        result = await client.call_tool("ascii_chart", CHART_ARGS)
    assert not result.is_error
    assert "a | ###" in result.content[0].text  # type: ignore[union-attr]
    [subscription] = await service.rows(Subscription)
    assert subscription.status == "active" and subscription.plan_id == "pro"


@pytest.fixture
async def request_style_service(database_url: str) -> AsyncIterator[RunningService]:
    async with run_service(database_url, elicitation_style="request", payment_wait_seconds=60) as running:
        yield running


async def test_legacy_elicitation_create_flow_in_chromium(
    request_style_service: RunningService, browser: Browser
) -> None:
    service = request_style_service
    await service.add_user("bea")
    token = (await service.personal_token("bea")).secret
    page = await new_page(browser)
    payments: list[asyncio.Task[None]] = []

    async def open_in_browser(params: t.ElicitRequestURLParams) -> t.ElicitResult:
        payments.append(asyncio.create_task(paid_and_landed(page, service, params.url, "bea")))
        return t.ElicitResult(action="accept")

    async with probed_client(
        service.mcp_url, token, ClientProbe(answer=open_in_browser), mode="legacy"
    ) as client:
        result = await client.call_tool("ascii_chart", CHART_ARGS)
    await asyncio.gather(*payments)
    assert not result.is_error, result
    assert "a | ###" in result.content[0].text  # type: ignore[union-attr]


async def test_modern_flow_in_chromium(service: RunningService, browser: Browser) -> None:
    await service.add_user("cy")
    token = (await service.personal_token("cy")).secret
    page = await new_page(browser)

    async def pay_then_accept(params: t.ElicitRequestURLParams) -> t.ElicitResult:
        await paid_and_landed(page, service, params.url, "cy")
        return t.ElicitResult(action="accept")

    async with probed_client(service.mcp_url, token, ClientProbe(answer=pay_then_accept)) as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("password_audit", {"password": "correct-horse-battery-staple-42"})
    assert not result.is_error, result
    assert result.structured_content is not None
    assert result.structured_content["verdict"] in ("strong", "fair")


async def test_phishing_link_opened_by_another_signed_in_user(
    service: RunningService, browser: Browser
) -> None:
    await service.add_user("dan")
    await service.add_user("mallory")
    token = (await service.personal_token("dan")).secret
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("ascii_chart", CHART_ARGS)
    [elicitation] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
    page = await new_page(browser)
    await page.goto(elicitation.url)
    await page.fill("#username", "mallory")
    await page.fill("#password", DEFAULT_PASSWORD)
    await page.click("#login-submit")
    await expect(page.locator("h1")).to_have_text("This link is not for you")
    await expect(page.locator("#pay-button")).to_have_count(0)
    assert (await service.stripe.v1.checkout.sessions.list_async()).data == []
    assert len(await service.rows(AuditEvent, kind="identity_mismatch")) == 1


async def test_payment_pages_send_strict_headers(service: RunningService, browser: Browser) -> None:
    await service.add_user("eli")
    token = (await service.personal_token("eli")).secret
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("ascii_chart", CHART_ARGS)
    [elicitation] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
    page = await new_page(browser)
    await page.goto(elicitation.url)
    await page.fill("#username", "eli")
    await page.fill("#password", DEFAULT_PASSWORD)
    async with page.expect_response(lambda response: response.url == elicitation.url) as pay_page:
        await page.click("#login-submit")
    response = await pay_page.value
    headers = await response.all_headers()
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["cache-control"] == "no-store"
    await expect(page.locator("#checkout-domain")).to_contain_text("127.0.0.1")
    await expect(page.locator("#plan-price")).to_have_text("9.00 USD / month")
