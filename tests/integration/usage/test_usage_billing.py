"""Included quotas and pay-as-you-go through the service: counted calls, blocked or metered, meter
events reported once to Stripe, and usage on the period-end invoice in the sandbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update
from sqlmodel import col

from service.billing.models import StripeCustomer, Subscription
from service.billing.stripe_gateway import StripeGateway
from service.billing.usage import release_call
from service.billing.usage_models import CreditBalance, UsageRecord
from service.billing.usage_reporter import UsageReporter
from service.db.metadata import utcnow
from tests.support.browserless import log_in_through_form
from tests.support.cli import run_cli
from tests.support.mcp_clients import ClientProbe, call_expecting_32042, probed_client
from tests.support.payment import buy_credits, pay, pay_for_plan
from tests.support.servers import bound_socket, port_of
from tests.support.service import DEFAULT_PASSWORD, RunningService, run_service
from tests.support.subscriptions import advance

MONTH = 31 * 86400
QUERY = {"query": "select 1"}
CHART = {"values": [1, 2]}
CATALOG = """
[[plans]]
id = "pro"
name = "Pro"
lookup_key = "t_pro"
amount = 900
currency = "usd"
interval = "month"
tools = ["ascii_chart", "sql_explain"]
included_calls = 3
overage = "block"

[[plans]]
id = "team"
name = "Team"
lookup_key = "t_team"
amount = 2900
currency = "usd"
interval = "month"
tools = ["ascii_chart", "sql_explain", "password_audit"]

[[plans]]
id = "payg"
name = "Pay as you go"
lookup_key = "t_payg"
amount = 0
currency = "usd"
interval = "month"
tools = ["ascii_chart", "sql_explain"]
included_calls = 0
overage = "meter"

[[metered_prices]]
tool = "sql_explain"
lookup_key = "t_sql_per_call"
event_name = "t_sql_explain_calls"
unit_amount = 2
currency = "usd"

[[metered_prices]]
tool = "ascii_chart"
lookup_key = "t_chart_per_call"
event_name = "t_ascii_chart_calls"
unit_amount = 1
currency = "usd"

[[credit_packs]]
id = "calls_3"
name = "3 calls"
lookup_key = "t_credits_3"
credits = 3
amount = 300
currency = "usd"
"""


@pytest.fixture
async def service(tmp_path: Path, database_url: str) -> AsyncIterator[RunningService]:
    plans = tmp_path / "plans.toml"
    plans.write_text(CATALOG)
    # The reporter runs when the test says so, not on a timer.
    async with run_service(database_url, plans_file=plans, usage_report_interval_seconds=0) as running:
        yield running


def reporter(service: RunningService, holder: str = "test") -> UsageReporter:
    runtime = service.runtime
    # Calls settle for no time here: the tests send what they have just recorded.
    return UsageReporter(
        runtime.sessions, runtime.stripe, runtime.catalog, holder=holder, settle=timedelta(0)
    )


@asynccontextmanager
async def pay_as_you_go_client(service: RunningService, username: str) -> AsyncIterator[Any]:
    """A new user's MCP client, after it bought the pay-as-you-go plan through the elicitation."""
    await service.add_user(username)
    token = (await service.personal_token(username)).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "sql_explain", QUERY)
        await pay_for_plan(service, elicitation.url, username, "payg")
        await probe.wait_for_completion()
        yield client


async def ran(client: object, tool: str = "sql_explain") -> None:
    result = await client.call_tool(tool, QUERY if tool == "sql_explain" else CHART)  # type: ignore[attr-defined]
    assert not result.is_error, result


async def test_past_the_included_calls_block_offers_upgrade_and_credits(service: RunningService) -> None:
    await service.add_user("ada")
    token = (await service.personal_token("ada")).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        first = await call_expecting_32042(client, "sql_explain", QUERY)
        await pay(service, first.url, "ada")
        await probe.wait_for_completion()
        for _ in range(3):
            await ran(client)
        exhausted = await call_expecting_32042(client, "ascii_chart", CHART)
        assert "Team" in exhausted.message, "past the quota, the plan offered is one the user lacks"

        async with service.http() as browser:
            path = exhausted.url.removeprefix(service.base_url)
            await log_in_through_form(browser, f"/login?next={path}", "ada", DEFAULT_PASSWORD)
            page = (await browser.get(path)).text
        assert 'id="plan-name">Team<' in page and 'id="pay-button"' in page
        assert 'id="plan-button-pro"' not in page, "Pro is not sold to its owner"
        assert 'id="credits-button-calls_3"' in page

        await buy_credits(service, exhausted.url, "ada", "calls_3")
        await service.sandbox.deliver_pending(within=15)
        await ran(client, "ascii_chart")
        [balance] = await service.rows(CreditBalance)
        assert balance.balance == 2, "past the quota a credit paid for the call"

        status = (await client.call_tool("billing_status", {})).structured_content
        assert status is not None
        [pro] = status["subscriptions"]
        assert (pro["calls_used"], pro["calls_included"], status["credits"]) == (3, 3, 2)
        assert status["summary"] == "Active: Pro (3 of 3 included calls used this period). Credits: 2."

        await advance(service, MONTH + 1)  # the next period: three included calls again
        await ran(client)
    [balance] = await service.rows(CreditBalance)
    assert balance.balance == 2
    fundings = sorted(row.funding for row in await service.rows(UsageRecord))
    assert fundings == ["credit"] + ["included"] * 4


async def test_pay_as_you_go_calls_are_reported_once_and_invoiced_at_period_end(
    service: RunningService,
) -> None:
    async with pay_as_you_go_client(service, "bea") as client:
        [subscription] = await service.rows(Subscription)
        assert subscription.plan_id == "payg"
        for tool in ("sql_explain", "sql_explain", "sql_explain", "ascii_chart", "ascii_chart"):
            await ran(client, tool)
        status = (await client.call_tool("billing_status", {})).structured_content
    assert status is not None
    [payg] = status["subscriptions"]
    assert (payg["metered_calls"], payg["metered_charges"], payg["currency"]) == (5, 8, "usd")
    assert "5 calls billed per call so far: 0.08 USD" in status["summary"]
    metered = await service.rows(UsageRecord, funding="metered")
    assert len(metered) == 5 and all(row.reported_at is None for row in metered)

    report = await reporter(service).run()
    assert (report.sent, report.failed) == (5, 0)
    assert all(row.reported_at is not None for row in await service.rows(UsageRecord))
    assert (await reporter(service).run()).sent == 0, "a reported call is not sent again"
    now = utcnow()
    assert await reporter(service).compare(now - timedelta(hours=1), now + timedelta(minutes=1)) == []

    await advance(service, MONTH + 1)
    [customer] = await service.rows(StripeCustomer)
    invoices = await service.stripe.v1.invoices.list_async(
        params={"subscription": subscription.id, "limit": 1}
    )
    renewal = invoices.data[0]
    assert renewal.billing_reason == "subscription_cycle" and renewal.customer == customer.customer_id
    usage = sorted((line.quantity, line.amount) for line in renewal.lines.data if line.amount)
    assert usage == [(2, 2), (3, 6)], "two charts at 1 cent, three explains at 2 cents"
    assert renewal.amount_due == 8


async def test_a_crash_between_sending_and_recording_reports_each_call_once(service: RunningService) -> None:
    async with pay_as_you_go_client(service, "cy") as client:
        for _ in range(4):
            await ran(client)

    crashed = reporter(service, holder="replica-a")
    rows = await crashed.due()
    assert len(rows) == 4
    await crashed.send(rows[:3])  # sent to Stripe, then the process died before recording it
    assert all(row.reported_at is None for row in await service.rows(UsageRecord))
    assert await reporter(service, holder="replica-b").due() == [], "claimed by the crashed process"
    async with service.runtime.sessions() as session, session.begin():
        await session.exec(update(UsageRecord).values(next_report_at=utcnow()))  # the claim ran out

    restarted = await reporter(service, holder="replica-b").run()
    assert (restarted.sent, restarted.failed) == (4, 0)
    now = utcnow()
    assert await reporter(service).compare(now - timedelta(hours=1), now + timedelta(minutes=1)) == []
    [customer] = await service.rows(StripeCustomer)
    [metered] = [m for m in service.runtime.catalog.metered_prices() if m.tool == "sql_explain"]
    start = int((now - timedelta(hours=1)).timestamp()) // 60 * 60
    assert await service.runtime.stripe.meter_usage(metered, customer.customer_id, start, start + 7200) == 4


async def test_a_meter_event_stripe_did_not_take_is_retried_after_a_backoff(service: RunningService) -> None:
    async with pay_as_you_go_client(service, "dee") as client:
        await ran(client)

    runtime = service.runtime
    with bound_socket() as closed:
        unreachable = f"http://127.0.0.1:{port_of(closed)}"  # bound, never listening: refused
    down = StripeGateway.create("sk_test_down", unreachable, runtime.catalog)
    try:
        report = await UsageReporter(
            runtime.sessions, down, runtime.catalog, holder="test", settle=timedelta(0)
        ).run()
    finally:
        await down.aclose()
    assert (report.sent, report.failed) == (0, 1)
    [failed] = await service.rows(UsageRecord)
    assert failed.reported_at is None and failed.report_attempts == 1 and failed.last_error
    assert failed.next_report_at is not None and failed.next_report_at > utcnow()
    assert (await reporter(service).run()).sent == 0, "not tried again before its backoff ends"

    async with runtime.sessions() as session, session.begin():
        await session.exec(update(UsageRecord).values(next_report_at=utcnow()))  # the backoff has passed
    assert (await reporter(service).run()).sent == 1
    [sent] = await service.rows(UsageRecord)
    assert sent.reported_at is not None and sent.last_error is None


async def test_many_calls_go_to_stripe_a_hundred_a_request_on_one_session(service: RunningService) -> None:
    async with pay_as_you_go_client(service, "fay") as client:
        await ran(client)
    [first] = await service.rows(UsageRecord, funding="metered")
    async with service.runtime.sessions() as session, session.begin():
        for index in range(249):  # as many more calls of the same user
            copied = first.model_dump()
            copied.update(id=f"{first.id}-{index}", call_key=f"{index:064d}")
            session.add(UsageRecord(**copied))
    requests = service.sandbox.request_log
    requests.clear()

    assert (await reporter(service).run()).sent == 250
    assert requests.count(("POST", "/v2/billing/meter_event_stream")) == 3
    assert requests.count(("POST", "/v2/billing/meter_event_session")) == 1
    now = utcnow()
    assert await reporter(service).compare(now - timedelta(hours=1), now + timedelta(minutes=1)) == []

    # The session runs out, then the sandbox forgets every session (a restart): each time the next
    # request is refused, a new session is made, and the events go through on it.
    for lose_the_session in (lambda: advance(service, 16 * 60), service.sandbox.meter_event_sessions.clear):
        async with service.runtime.sessions() as session, session.begin():
            await session.exec(update(UsageRecord).values(reported_at=None, next_report_at=utcnow()))
        if (pending := lose_the_session()) is not None:
            await pending
        requests.clear()
        assert (await reporter(service).run()).sent == 250, "sent again: Stripe counts each identifier once"
        assert requests.count(("POST", "/v2/billing/meter_event_session")) == 1
        assert await reporter(service).compare(now - timedelta(hours=1), now + timedelta(minutes=1)) == []


async def test_report_usage_command_sends_and_compares(service: RunningService) -> None:
    async with pay_as_you_go_client(service, "eli") as client:
        await ran(client)
        await ran(client, "ascii_chart")
    env = {
        "DATABASE_URL": service.settings.database.url,
        "STRIPE_SECRET_KEY": service.settings.stripe.secret_key.get_secret_value(),
        "STRIPE_API_BASE": service.sandbox.config.public_base_url,
        "PLANS_FILE": str(service.settings.billing.plans_file),
        "USAGE_REPORT_SETTLE_SECONDS": "0",
    }
    done = await run_cli("stripe", "report-usage", "--hours", "1", env=env)
    assert done.returncode == 0, done.stderr
    assert "sent 2 meter events; 0 failed" in done.stdout
    assert "match Stripe's meter event summaries" in done.stdout
    assert all(row.reported_at is not None for row in await service.rows(UsageRecord))


async def test_a_metered_call_taken_for_sending_stays_billed_when_it_fails(service: RunningService) -> None:
    """Once the reporter has taken a row to send, a failure of its call no longer gives it back:
    Stripe may already count it, and the row must stay to match."""
    async with pay_as_you_go_client(service, "gil") as client:
        await ran(client)
        await ran(client)
    taken, left = await service.rows(UsageRecord, funding="metered")
    async with service.runtime.sessions() as session, session.begin():
        await session.exec(
            update(UsageRecord)
            .where(col(UsageRecord.id) == left.id)
            .values(next_report_at=utcnow() + timedelta(hours=1))
        )
    assert [row.id for row in await reporter(service).due()] == [taken.id]
    async with service.runtime.sessions() as session, session.begin():
        assert await release_call(session, taken.user_id, taken.id) is None
    async with service.runtime.sessions() as session, session.begin():
        await session.exec(
            update(UsageRecord).where(col(UsageRecord.id) == left.id).values(next_report_at=utcnow())
        )
    async with service.runtime.sessions() as session, session.begin():
        assert await release_call(session, left.user_id, left.id) == "metered"
    assert [row.id for row in await service.rows(UsageRecord, funding="metered")] == [taken.id]


async def test_a_metered_call_is_not_sent_while_it_may_still_fail(service: RunningService) -> None:
    """The reporter leaves a metered call alone for the settling time (the service's default), so a
    call that fails meanwhile is given back and never reaches Stripe; a settled one is sent."""
    runtime = service.runtime
    settle = timedelta(seconds=service.settings.billing.usage_report_settle_seconds)
    assert settle >= timedelta(minutes=1), "the default settles calls"
    settling = UsageReporter(runtime.sessions, runtime.stripe, runtime.catalog, holder="t", settle=settle)
    async with pay_as_you_go_client(service, "hal") as client:
        await ran(client)
        await ran(client)
    failed, settled = await service.rows(UsageRecord, funding="metered")
    assert await settling.due() == [], "both calls are still settling"
    async with service.runtime.sessions() as session, session.begin():
        assert await release_call(session, failed.user_id, failed.id) == "metered"
        await session.exec(
            update(UsageRecord)
            .where(col(UsageRecord.id) == settled.id)
            .values(created_at=utcnow() - settle - timedelta(seconds=1))
        )
    report = await settling.run()
    assert (report.sent, report.failed) == (1, 0)
    assert [row.id for row in await service.rows(UsageRecord, funding="metered")] == [settled.id]
