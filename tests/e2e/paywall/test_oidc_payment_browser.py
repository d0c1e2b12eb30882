"""The paid-tool flow with an external OpenID Provider: the payment page proves the browser's user
by an OIDC login at the same issuer, in a real Chromium, against a real oidc-provider process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import MCPError, UrlElicitationRequiredError
from playwright.async_api import Browser, Page, expect

from service.audit.models import AuditEvent
from service.billing.models import Subscription
from service.identity.oidc.models import ExternalIdentity
from tests.support.browser import fill_stripe_checkout, new_page
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.oidc_provider import OidcProvider, new_signing_key, run_service_with_provider
from tests.support.service import RunningService

pytestmark = pytest.mark.browser

CARD = "4242424242424242"
CHART_ARGS = {"values": [3, 1, 2], "labels": ["a", "b", "c"]}


@pytest.fixture
async def stack(database_url: str, tmp_path: Path) -> AsyncIterator[tuple[OidcProvider, RunningService]]:
    async with run_service_with_provider(database_url, tmp_path, keys=[new_signing_key("k1")]) as running:
        yield running


async def sign_in_at_provider(page: Page, provider: OidcProvider, username: str) -> None:
    await page.wait_for_url(f"{provider.issuer}/interaction/*")
    await page.fill('input[name="login"]', username)
    await page.fill('input[name="password"]', "any password")
    await page.click('button[type="submit"]')


async def elicitation_for(service: RunningService, token: str) -> tuple[str, str]:
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("ascii_chart", CHART_ARGS)
    [elicitation] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
    assert elicitation.elicitation_id is not None
    return elicitation.url, elicitation.elicitation_id


async def test_pay_after_signing_in_at_the_provider(
    stack: tuple[OidcProvider, RunningService], browser: Browser
) -> None:
    provider, service = stack
    token = await provider.user_access_token("ada", service.mcp_url)
    probe = ClientProbe()
    page = await new_page(browser)
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("ascii_chart", CHART_ARGS)
        [elicitation] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
        await page.goto(elicitation.url)
        await sign_in_at_provider(page, provider, "ada")
        await page.wait_for_url(elicitation.url)
        await expect(page.locator("#plan-name")).to_be_visible()
        await page.click("#pay-button")
        await page.wait_for_url("**/c/pay/cs_*")
        await fill_stripe_checkout(page, CARD)
        await page.wait_for_url(f"{elicitation.url}/success?session_id=cs_*")
        assert await probe.wait_for_completion() == elicitation.elicitation_id
        result = await client.call_tool("ascii_chart", CHART_ARGS)
    assert not result.is_error, result
    assert "a | ###" in result.content[0].text  # type: ignore[union-attr]
    [subscription] = await service.rows(Subscription)
    [identity] = await service.rows(ExternalIdentity, subject="ada")
    assert subscription.status == "active" and subscription.user_id == identity.user_id


async def test_a_stranger_signed_in_at_the_provider_gets_403(
    stack: tuple[OidcProvider, RunningService], browser: Browser
) -> None:
    provider, service = stack
    url, _ = await elicitation_for(service, await provider.user_access_token("dan", service.mcp_url))
    page = await new_page(browser)
    await page.goto(url)
    await sign_in_at_provider(page, provider, "mallory")
    await page.wait_for_url(url)
    await expect(page.locator("h1")).to_have_text("This link is not for you")
    await expect(page.locator("#message")).to_contain_text("This payment link belongs to another account")
    await expect(page.locator("#pay-button")).to_have_count(0)
    assert (await service.stripe.v1.checkout.sessions.list_async()).data == []
    assert len(await service.rows(AuditEvent, kind="identity_mismatch")) == 1
    assert {row.subject for row in await service.rows(ExternalIdentity)} == {"dan", "mallory"}
