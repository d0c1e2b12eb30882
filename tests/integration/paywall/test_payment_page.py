"""The payment page's refusals and limits: unknown, expired, completed, signed out, CSRF, rate limits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from mcp import MCPError, UrlElicitationRequiredError
from sqlalchemy import event

from service.audit.models import AuditEvent
from service.billing.models import StripeCustomer
from service.db.metadata import utcnow
from service.identity.models import User
from service.paywall.models import Elicitation, ElicitationDelivery
from tests.support import factories
from tests.support.browserless import csrf_token, log_in_through_form
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.payment import checkout_session_id, open_checkout, pay
from tests.support.service import DEFAULT_PASSWORD, RunningService, run_service
from tests.support.stripe_outage import OUTAGES, StripeOutage, service_with_stripe

CHART_ARGS = {"values": [1, 2, 3]}


async def elicit(service: RunningService, username: str, **kwargs: Any) -> str:
    """A new user's payment link, as their first paid call opens it (kwargs: `factories.elicitation`)."""
    return await factories.payment_link(service, await service.add_user(username), **kwargs)


async def test_signed_out_visitors_are_sent_to_login_and_back(service: RunningService) -> None:
    url = await elicit(service, "amy")
    path = urlsplit(url).path
    async with service.http() as browser:
        first = await browser.get(path)
        assert first.status_code == 303
        assert first.headers["location"] == f"/login?next=%2Fpay%2F{path.rsplit('/', 1)[1]}"
        back = await log_in_through_form(browser, first.headers["location"], "amy", DEFAULT_PASSWORD)
        assert back.headers["location"] == path
        page = await browser.get(path)
    assert page.status_code == 200
    assert "Pro" in page.text and "9.00 USD / month" in page.text
    # The plan's button, one per other plan unlocking the tool, one per credit pack of the catalog.
    buttons = [
        'id="pay-button"',
        'id="plan-button-team"',
        'id="plan-button-payg"',
        'id="credits-button-calls_100"',
    ]
    assert page.text.count("<button") == len(buttons)
    assert all(button in page.text for button in buttons)


async def test_unknown_link(service: RunningService) -> None:
    await service.add_user("bob")
    async with service.http() as browser:
        await log_in_through_form(browser, "/login", "bob", DEFAULT_PASSWORD)
        page = await browser.get("/pay/el_doesnotexist")
    assert page.status_code == 404
    assert "does not exist" in page.text


async def test_a_link_not_shaped_like_our_ids_is_not_found_without_a_query(
    service: RunningService,
) -> None:
    await service.add_user("bea")
    lookups: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if "FROM elicitation" in statement:
            lookups.append(statement)

    async with service.http() as browser:
        await log_in_through_form(browser, "/login", "bea", DEFAULT_PASSWORD)
        form = await browser.get("/login")
        engine = service.runtime.engine.sync_engine
        event.listen(engine, "before_cursor_execute", note)
        try:
            # A NUL byte is a DataError on PostgreSQL, were it ever sent there.
            pages = [await browser.get(f"/pay/{raw}") for raw in ("el_%00x", "el_" + "%00" * 32, "x" * 35)]
            restarted = await browser.post("/pay/el_%00x/restart", data={"csrf_token": csrf_token(form.text)})
        finally:
            event.remove(engine, "before_cursor_execute", note)
    assert [page.status_code for page in pages] == [404, 404, 404]
    assert restarted.status_code == 404
    assert lookups == []


async def test_expired_link_offers_a_fresh_start(service: RunningService) -> None:
    url = await elicit(service, "cat")
    elicitation_id = url.rsplit("/", 1)[1]
    async with service.runtime.sessions() as session, session.begin():
        row = await session.get(Elicitation, elicitation_id)
        assert row is not None
        row.expires_at = utcnow() - timedelta(seconds=1)
        session.add(row)
    refused = await open_checkout(service, url, "cat")
    assert refused.status_code == 410
    assert "expired and nothing was charged" in refused.text
    fresh = await elicit_again(service, "cat")
    assert fresh != url, "an expired elicitation is replaced, not reused"


async def test_expired_link_page_starts_again_for_the_same_sessions(service: RunningService) -> None:
    url = await elicit(service, "cal", mcp_session_id="session-of-cal")
    old_id = url.rsplit("/", 1)[1]
    async with service.runtime.sessions() as session, session.begin():
        row = await session.get(Elicitation, old_id)
        assert row is not None
        row.expires_at = utcnow() - timedelta(seconds=1)
        session.add(row)
    path = urlsplit(url).path
    async with service.http() as browser:
        await log_in_through_form(browser, f"/login?next={path}", "cal", DEFAULT_PASSWORD)
        expired = await browser.get(path)
        assert expired.status_code == 410
        restarted = await browser.post(f"{path}/restart", data={"csrf_token": csrf_token(expired.text)})
        assert restarted.status_code == 303
        new_path = restarted.headers["location"]
        assert new_path.startswith("/pay/el_") and new_path != path
        assert (await browser.get(new_path)).status_code == 200
    new_id = new_path.rsplit("/", 1)[1]
    old_sessions = {
        row.mcp_session_id for row in await service.rows(ElicitationDelivery, elicitation_id=old_id)
    }
    new_sessions = {
        row.mcp_session_id for row in await service.rows(ElicitationDelivery, elicitation_id=new_id)
    }
    assert old_sessions and new_sessions == old_sessions


async def elicit_again(service: RunningService, username: str) -> str:
    token = (await service.personal_token(username)).secret
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("ascii_chart", CHART_ARGS)
    return UrlElicitationRequiredError.from_error(raised.value.error).elicitations[0].url


async def test_completed_link_says_so_and_creates_nothing(service: RunningService) -> None:
    url = await elicit(service, "dan")
    await pay(service, url, "dan")
    await service.sandbox.deliver_pending(within=10)
    again = await open_checkout(service, url, "dan")
    assert again.status_code == 200
    assert "Already paid" in again.text
    assert len((await service.stripe.v1.checkout.sessions.list_async()).data) == 1


async def test_post_without_csrf_token_is_refused(service: RunningService) -> None:
    url = await elicit(service, "eve")
    path = urlsplit(url).path
    async with service.http() as browser:
        await log_in_through_form(browser, f"/login?next={path}", "eve", DEFAULT_PASSWORD)
        refused = await browser.post(path, data={})
    assert refused.status_code == 400
    assert (await service.stripe.v1.checkout.sessions.list_async()).data == []


async def test_pressing_the_button_twice_reuses_the_checkout_session(service: RunningService) -> None:
    url = await elicit(service, "fin")
    first = await open_checkout(service, url, "fin")
    second = await open_checkout(service, url, "fin")
    assert first.status_code == second.status_code == 303
    assert checkout_session_id(first.headers["location"]) == checkout_session_id(second.headers["location"])
    [customer] = (await service.stripe.v1.customers.list_async()).data
    assert customer.metadata is not None
    assert customer.metadata["user_id"] == (await service.rows(Elicitation))[0].user_id


@pytest.fixture
async def strict_service(database_url: str) -> AsyncIterator[RunningService]:
    async with run_service(database_url, max_elicitations_per_hour=1, max_checkouts_per_hour=1) as running:
        yield running


async def test_elicitation_rate_limit_is_a_clear_tool_error(strict_service: RunningService) -> None:
    service = strict_service
    await elicit(service, "gil")
    token = (await service.personal_token("gil")).secret
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
        # A second plan's elicitation would be a new one: password_audit needs Team, not Pro.
        result = await client.call_tool("password_audit", {"password": "x"})
    assert result.is_error
    assert "Too many payment links" in result.content[0].text  # type: ignore[union-attr]


async def test_checkout_rate_limit_is_a_429_with_retry_after(database_url: str) -> None:
    async with run_service(database_url, max_checkouts_per_hour=1) as service:
        pro_url = await elicit(service, "hal")
        [hal] = await service.rows(User, username="hal")
        team_url = await factories.payment_link(service, hal, tool="password_audit")
        assert team_url != pro_url
        assert (await open_checkout(service, pro_url, "hal")).status_code == 303
        limited = await open_checkout(service, team_url, "hal")
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "3600"
        assert len(await service.rows(AuditEvent, kind="rate_limited")) == 1
        assert len((await service.stripe.v1.checkout.sessions.list_async()).data) == 1


async def test_choosing_another_plan_replaces_the_open_checkout(service: RunningService) -> None:
    url = await elicit(service, "ivy")
    path = urlsplit(url).path
    async with service.http() as browser:
        await log_in_through_form(browser, f"/login?next={path}", "ivy", DEFAULT_PASSWORD)
        page = await browser.get(path)
        pro = await browser.post(path, data={"csrf_token": csrf_token(page.text)})
        page = await browser.get(path)  # the user comes back and picks Team instead
        team = await browser.post(path, data={"csrf_token": csrf_token(page.text), "plan_id": "team"})
    assert pro.status_code == team.status_code == 303
    pro_id = checkout_session_id(pro.headers["location"])
    team_id = checkout_session_id(team.headers["location"])
    assert team_id != pro_id
    team_checkout = await service.stripe.v1.checkout.sessions.retrieve_async(team_id)
    assert team_checkout.metadata is not None and team_checkout.metadata["plan_id"] == "team"
    # The Pro checkout can no longer be paid besides, and the link now waits for the Team one.
    assert (await service.stripe.v1.checkout.sessions.retrieve_async(pro_id)).status == "expired"
    await service.sandbox.deliver_pending(within=10)
    [row] = await service.rows(Elicitation)
    assert row.checkout_session_id == team_id and row.status == "open"


async def test_repeated_views_and_refusals_are_sampled_and_pay_presses_counted(
    database_url: str,
) -> None:
    async with run_service(database_url, max_pay_attempts_per_user_per_hour=3) as service:
        url = await elicit(service, "ada")
        await service.add_user("ben")
        path = urlsplit(url).path
        async with service.http() as ada:
            await log_in_through_form(ada, f"/login?next={path}", "ada", DEFAULT_PASSWORD)
            opened = [(await ada.get(path)).status_code for _ in range(30)]
        async with service.http() as ben:
            await log_in_through_form(ben, "/login", "ben", DEFAULT_PASSWORD)
            viewed = [(await ben.get(path)).status_code for _ in range(30)]
            form = await ben.get("/login")
            pressed = [
                (await ben.post(path, data={"csrf_token": csrf_token(form.text)})).status_code
                for _ in range(4)
            ]
        assert opened == [200] * 30 and viewed == [403] * 30
        # Presses on another account's link count toward the pay button's limit like any other.
        assert pressed == [403, 403, 403, 429]
        [page_opened] = await service.rows(AuditEvent, kind="payment_page_opened")
        [mismatch] = await service.rows(AuditEvent, kind="identity_mismatch")
        assert '"count": 1' in page_opened.detail and '"count": 1' in mismatch.detail
        assert len(await service.rows(AuditEvent, kind="checkout_attempt")) == 3
        assert (await service.stripe.v1.checkout.sessions.list_async()).data == []


@pytest.mark.parametrize("outage", OUTAGES)
@pytest.mark.parametrize("button", ["", "/credits"])
async def test_pay_buttons_answer_503_to_retry_when_stripe_throttles_or_cannot_be_reached(
    database_url: str, outage: StripeOutage, button: str
) -> None:
    async with service_with_stripe(database_url, outage) as service:
        path = urlsplit(await elicit(service, "kim")).path
        pack = service.runtime.catalog.credit_packs()[0].id
        async with service.http() as browser:
            await log_in_through_form(browser, f"/login?next={path}", "kim", DEFAULT_PASSWORD)
            page = await browser.get(path)
            pressed = await browser.post(
                f"{path}{button}", data={"csrf_token": csrf_token(page.text), "pack_id": pack}
            )
    assert pressed.status_code == 503, pressed.text
    assert pressed.headers["retry-after"] == "5"
    assert "Payment page unavailable" in pressed.text and "try again in a moment" in pressed.text


async def test_pay_button_stripe_refuses_is_a_502_page(service: RunningService) -> None:
    path = urlsplit(await elicit(service, "lin")).path
    [user] = await service.rows(User, username="lin")
    async with service.runtime.sessions() as session, session.begin():
        session.add(StripeCustomer(user_id=user.id, customer_id="cus_doesnotexist"))
    async with service.http() as browser:
        await log_in_through_form(browser, f"/login?next={path}", "lin", DEFAULT_PASSWORD)
        page = await browser.get(path)
        pressed = await browser.post(path, data={"csrf_token": csrf_token(page.text)})
    assert pressed.status_code == 502, pressed.text
    assert "retry-after" not in pressed.headers
    assert "Payment page unavailable" in pressed.text and "Nothing was charged" in pressed.text
