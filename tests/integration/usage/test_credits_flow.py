"""Prepaid credits end to end: bought through the URL elicitation, spent call by call, asked again at zero."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import mcp_types as t
import pytest
from mcp import MCPError

from service.billing.usage_models import CreditBalance, CreditEntry, UsageRecord
from service.paywall.models import Elicitation
from stripe_sandbox import SandboxConfig, create_sandbox_app
from tests.integration.webhooks.test_stripe_webhook import event_body, post_webhook, signed
from tests.support.databases import TEMPLATE_FIXTURES, DatabaseTemplates
from tests.support.mcp_clients import ClientProbe, call_expecting_32042, probed_client
from tests.support.payment import answer_dispute, buy_credits, checkout_payment
from tests.support.servers import bound_socket, port_of, serve
from tests.support.service import RunningService, make_settings, run_service, run_service_on

QUERY = {"query": "select * from orders where customer_id = 1"}
KEY = "sk_test_silent_stripe"
SMALL_PACKS = """
[[plans]]
id = "pro"
name = "Pro"
lookup_key = "test_pro_monthly"
amount = 900
currency = "usd"
interval = "month"
tools = ["ascii_chart", "sql_explain"]

[[plans]]
id = "team"
name = "Team"
lookup_key = "test_team_monthly"
amount = 2900
currency = "usd"
interval = "month"
tools = ["ascii_chart", "sql_explain", "password_audit"]

[[credit_packs]]
id = "calls_3"
name = "3 calls"
lookup_key = "test_credits_3"
credits = 3
amount = 300
currency = "usd"

[[credit_packs]]
id = "calls_50"
name = "50 calls"
lookup_key = "test_credits_50"
credits = 50
amount = 2000
currency = "usd"
"""


async def test_buy_the_pack_through_the_elicitation_spend_it_to_zero_then_asked_again(
    service: RunningService,
) -> None:
    await service.add_user("ada")
    token = (await service.personal_token("ada")).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "sql_explain", QUERY)
        assert "100 calls for 5.00 USD once" in elicitation.message

        checkout_id = await buy_credits(service, elicitation.url, "ada", "calls_100")
        assert await probe.wait_for_completion() == elicitation.elicitation_id

        for _ in range(100):
            result = await client.call_tool("sql_explain", QUERY)
            assert not result.is_error, result
        again = await call_expecting_32042(client, "sql_explain", QUERY)
        assert again.elicitation_id != elicitation.elicitation_id, "the paid elicitation is not reused"

    [balance] = await service.rows(CreditBalance)
    assert balance.balance == 0
    entries = await service.rows(CreditEntry)
    assert [(e.reason, e.delta) for e in entries if e.reason == "purchase"] == [("purchase", 100)]
    assert sum(e.delta for e in entries) == 0
    assert [e.source for e in entries if e.reason == "purchase"] == [f"checkout:{checkout_id}"]
    assert len(await service.rows(UsageRecord, funding="credit")) == 100
    [paid] = await service.rows(Elicitation, id=elicitation.elicitation_id)
    assert paid.status == "completed"


@pytest.fixture
async def small_pack_service(tmp_path: Path, database_url: str) -> AsyncIterator[RunningService]:
    plans = tmp_path / "plans.toml"
    plans.write_text(SMALL_PACKS)
    async with run_service(database_url, plans_file=plans, retry_wait_seconds=30) as running:
        yield running


async def test_modern_client_buys_credits_and_its_retry_runs(small_pack_service: RunningService) -> None:
    service = small_pack_service
    await service.add_user("kai")
    token = (await service.personal_token("kai")).secret

    async def buy_then_accept(params: t.ElicitRequestURLParams) -> t.ElicitResult:
        await buy_credits(service, params.url, "kai", "calls_3")
        return t.ElicitResult(action="accept")

    probe = ClientProbe(answer=buy_then_accept)
    async with probed_client(service.mcp_url, token, probe) as client:
        assert client.protocol_version == "2026-07-28"
        for _ in range(3):
            result = await client.call_tool("sql_explain", QUERY)
            assert not result.is_error, result
        assert len(probe.url_requests) == 1, "one purchase pays for three calls"
        first = await client.session.call_tool("sql_explain", QUERY, allow_input_required=True)
    assert isinstance(first, t.InputRequiredResult), "at zero credits the elicitation comes back"
    [balance] = await service.rows(CreditBalance)
    assert balance.balance == 0


@pytest.fixture(params=["sqlite", "postgres"])
async def racing_service(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunningService]:
    """Both backends whatever TEST_DATABASE says: the PostgreSQL suite leaves these tests out."""
    templates: DatabaseTemplates = request.getfixturevalue(TEMPLATE_FIXTURES[request.param])
    url = templates.fresh_url(tmp_path)
    plans = tmp_path / "plans.toml"
    plans.write_text(SMALL_PACKS)
    async with run_service(url, plans_file=plans) as running:
        yield running


async def test_100_parallel_calls_with_50_credits_run_exactly_50(racing_service: RunningService) -> None:
    service = racing_service
    await service.add_user("ray")
    token = (await service.personal_token("ray")).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "sql_explain", QUERY)
        await buy_credits(service, elicitation.url, "ray", "calls_50")
        await probe.wait_for_completion()

        async def call(n: int) -> str:
            try:
                result = await client.call_tool("sql_explain", {"query": f"select {n}"})
            except MCPError as exc:
                return "elicited" if exc.code == -32042 else f"error {exc.code}"
            return "error" if result.is_error else "ran"

        outcomes = await asyncio.gather(*(call(n) for n in range(100)))
    assert outcomes.count("ran") == 50
    assert outcomes.count("elicited") == 50
    [balance] = await service.rows(CreditBalance)
    assert balance.balance == 0
    assert len(await service.rows(UsageRecord, funding="credit")) == 50


async def balance_of(service: RunningService) -> int:
    [row] = await service.rows(CreditBalance)
    return int(row.balance)


@pytest.mark.parametrize("reversal", ["refund", "dispute"])
async def test_a_refund_or_dispute_takes_back_the_unspent_credits(
    small_pack_service: RunningService, reversal: str
) -> None:
    service = small_pack_service
    await service.add_user("ivy")
    token = (await service.personal_token("ivy")).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "sql_explain", QUERY)
        checkout_id = await buy_credits(service, elicitation.url, "ivy", "calls_3")
        await probe.wait_for_completion()
        assert not (await client.call_tool("sql_explain", QUERY)).is_error
        assert await balance_of(service) == 2

        payment_intent, charge_id = await checkout_payment(service.stripe, checkout_id)
        if reversal == "refund":
            await service.stripe.v1.refunds.create_async(params={"payment_intent": payment_intent})
        else:
            await service.stripe.raw_request_async("post", f"/v1/test_helpers/charges/{charge_id}/dispute")
        await service.sandbox.deliver_pending(within=10)

        assert await balance_of(service) == 0, "the two unspent credits are taken back"
        await call_expecting_32042(client, "sql_explain", QUERY)
    [taken] = await service.rows(CreditEntry, reason="reversal")
    assert taken.delta == -2 and taken.payment_intent_id == payment_intent


@pytest.mark.parametrize("evidence", ["winning_evidence", "losing_evidence"])
async def test_a_won_dispute_gives_the_credits_back_once_and_a_lost_one_keeps_them(
    small_pack_service: RunningService, evidence: str
) -> None:
    service = small_pack_service
    await service.add_user("una")
    token = (await service.personal_token("una")).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "sql_explain", QUERY)
        checkout_id = await buy_credits(service, elicitation.url, "una", "calls_3")
        await probe.wait_for_completion()
        assert not (await client.call_tool("sql_explain", QUERY)).is_error
    _, charge_id = await checkout_payment(service.stripe, checkout_id)
    await service.stripe.raw_request_async("post", f"/v1/test_helpers/charges/{charge_id}/dispute")
    await service.sandbox.deliver_pending(within=10)
    assert await balance_of(service) == 0, "the two unspent credits are taken back"

    await answer_dispute(service.stripe, charge_id, evidence)
    await service.sandbox.deliver_pending(within=10)
    # Stripe may deliver the dispute's events again, in any order: they change nothing more.
    for event_type in ("charge.dispute.closed", "charge.dispute.created"):
        [event] = (await service.stripe.v1.events.list_async(params={"type": event_type})).data
        await service.stripe.raw_request_async("post", f"/v1/events/{event.id}/retry")
        await service.sandbox.deliver_pending(within=10)

    won = evidence == "winning_evidence"
    assert await balance_of(service) == (2 if won else 0)
    entries = [(entry.reason, entry.delta) for entry in await service.rows(CreditEntry)]
    given_back = [("reinstatement", 2)] if won else []
    assert sorted(entries) == sorted([("purchase", 3), ("spend", -1), ("reversal", -2), *given_back])


async def test_an_inquiry_keeps_the_credits_until_it_escalates(small_pack_service: RunningService) -> None:
    service = small_pack_service
    await service.add_user("ina")
    token = (await service.personal_token("ina")).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "sql_explain", QUERY)
        checkout_id = await buy_credits(service, elicitation.url, "ina", "calls_3")
        await probe.wait_for_completion()
        payment_intent, charge_id = await checkout_payment(service.stripe, checkout_id)
        await service.stripe.raw_request_async(
            "post", f"/v1/test_helpers/charges/{charge_id}/dispute", case_type="inquiry"
        )
        await service.sandbox.deliver_pending(within=10)
        assert await balance_of(service) == 3, "an inquiry withdraws no funds"
        assert not (await client.call_tool("sql_explain", QUERY)).is_error

        await answer_dispute(service.stripe, charge_id, "escalate_inquiry_evidence")
        await service.sandbox.deliver_pending(within=10)
        assert await balance_of(service) == 0, "the escalated chargeback takes the two unspent credits"
        await call_expecting_32042(client, "sql_explain", QUERY)
    [taken] = await service.rows(CreditEntry, reason="reversal")
    assert taken.delta == -2 and taken.payment_intent_id == payment_intent


@asynccontextmanager
async def service_without_webhooks(tmp_path: Path, database_url: str) -> AsyncIterator[RunningService]:
    """The service with the small packs, over a sandbox of its own that sends no webhooks."""
    plans = tmp_path / "plans.toml"
    plans.write_text(SMALL_PACKS)
    stripe_socket = bound_socket()
    base = f"http://127.0.0.1:{port_of(stripe_socket)}"
    silent = create_sandbox_app(SandboxConfig(api_key=KEY, public_base_url=base, webhook_endpoints=()))
    service_socket = bound_socket()
    settings = make_settings(
        database_url, port_of(service_socket), stripe_secret_key=KEY, stripe_api_base=base, plans_file=plans
    )
    async with serve(silent, stripe_socket), run_service_on(settings, service_socket) as service:
        await service.runtime.stripe.sync_plans()
        yield service


async def test_reconciliation_grants_credits_whose_webhook_was_missed(
    tmp_path: Path, database_url: str
) -> None:
    async with service_without_webhooks(tmp_path, database_url) as service:
        await service.add_user("max")
        token = (await service.personal_token("max")).secret
        probe = ClientProbe()
        async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
            elicitation = await call_expecting_32042(client, "sql_explain", QUERY)
            await buy_credits(service, elicitation.url, "max", "calls_3")
            assert await service.rows(CreditBalance) == [], "no webhook arrived"

            report = await service.runtime.reconciler.run()
            assert report.repaired == 1
            assert await balance_of(service) == 3
            assert await probe.wait_for_completion() == elicitation.elicitation_id
            assert not (await client.call_tool("sql_explain", QUERY)).is_error
        again = await service.runtime.reconciler.run()
        assert (again.repaired, again.checkouts_current) == (0, 1), "a granted purchase is not read again"
        assert await balance_of(service) == 2, "reconciling again grants nothing more"


@pytest.mark.parametrize("reversal", ["refund", "dispute", "dispute won"])
async def test_reconciliation_applies_refunds_and_disputes_whose_webhooks_were_missed(
    tmp_path: Path, database_url: str, reversal: str
) -> None:
    async with service_without_webhooks(tmp_path, database_url) as service:
        await service.add_user("pia")
        token = (await service.personal_token("pia")).secret
        async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
            elicitation = await call_expecting_32042(client, "sql_explain", QUERY)
            checkout_id = await buy_credits(service, elicitation.url, "pia", "calls_3")
            await service.runtime.reconciler.run()
            assert not (await client.call_tool("sql_explain", QUERY)).is_error
            assert await balance_of(service) == 2
            payment_intent, charge_id = await checkout_payment(service.stripe, checkout_id)
            if reversal == "refund":
                await service.stripe.v1.refunds.create_async(params={"payment_intent": payment_intent})
            else:
                await service.stripe.raw_request_async(
                    "post", f"/v1/test_helpers/charges/{charge_id}/dispute"
                )
            if reversal == "dispute won":
                await answer_dispute(service.stripe, charge_id, "winning_evidence")

            report = await service.runtime.reconciler.run()
            replayed = {"refund": 1, "dispute": 2, "dispute won": 4}[reversal]
            assert report.events_replayed == replayed, (
                "refund, or dispute opened, withdrawn (closed, reinstated)"
            )
            if reversal == "dispute won":
                assert report.repaired == 0, "a dispute already won took nothing"
                assert await balance_of(service) == 2
            else:
                assert await balance_of(service) == 0, "the two unspent credits are taken back"
                await call_expecting_32042(client, "sql_explain", QUERY)
            if reversal == "dispute":
                await answer_dispute(service.stripe, charge_id, "winning_evidence")
                won = await service.runtime.reconciler.run()
                assert won.events_replayed == 2, "the dispute closed, its funds reinstated"
                assert await balance_of(service) == 2, "the won dispute gives the two credits back"
        again = await service.runtime.reconciler.run()
        assert (again.events_replayed, again.repaired) == (0, 0), "a replayed event is stored: never again"


async def test_a_purchase_refunded_before_its_grant_is_applied_grants_nothing_lasting(
    tmp_path: Path, database_url: str
) -> None:
    async with service_without_webhooks(tmp_path, database_url) as service:
        await service.add_user("nia")
        token = (await service.personal_token("nia")).secret
        async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
            elicitation = await call_expecting_32042(client, "sql_explain", QUERY)
            checkout_id = await buy_credits(service, elicitation.url, "nia", "calls_3")
            checkout = await service.stripe.v1.checkout.sessions.retrieve_async(checkout_id)
            await service.stripe.v1.refunds.create_async(
                params={"payment_intent": str(checkout.payment_intent)}
            )

            await service.runtime.reconciler.run()  # the purchase is applied only now, refund and all
            assert await balance_of(service) == 0
            await call_expecting_32042(client, "sql_explain", QUERY)
        reasons = sorted(entry.reason for entry in await service.rows(CreditEntry))
        assert reasons == ["purchase", "reversal"]


async def test_a_refund_handled_before_its_purchase_is_granted_takes_the_credits_back(
    tmp_path: Path, database_url: str
) -> None:
    """The refund's webhook is applied in the gap between the checkout's read of the payment (not
    refunded yet) and its grant: it finds no purchase, and must not be lost."""
    async with service_without_webhooks(tmp_path, database_url) as service:
        await service.add_user("oli")
        token = (await service.personal_token("oli")).secret
        async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
            elicitation = await call_expecting_32042(client, "sql_explain", QUERY)
            checkout_id = await buy_credits(service, elicitation.url, "oli", "calls_3")
            checkout = await service.stripe.v1.checkout.sessions.retrieve_async(checkout_id)
            payment_intent = str(checkout.payment_intent)
            charge = {"id": "ch_1", "object": "charge", "payment_intent": payment_intent, "refunded": True}
            body = event_body("evt_refund", "charge.refunded", charge)
            status, answer = await post_webhook(service, body, signed(service, body))
            assert (status, answer["outcome"]) == (200, "applied"), answer

            await service.runtime.reconciler.run()  # the grant, from a read that saw no refund
            assert await balance_of(service) == 0, "the refund recorded before takes the credits back"
            await call_expecting_32042(client, "sql_explain", QUERY)
        entries = sorted((entry.reason, entry.delta) for entry in await service.rows(CreditEntry))
        assert entries == [("purchase", 3), ("reversal", -3)]


async def test_a_waiting_elicitation_create_runs_once_credits_arrive(
    tmp_path: Path, database_url: str
) -> None:
    plans = tmp_path / "plans.toml"
    plans.write_text(SMALL_PACKS)
    async with run_service(
        database_url, plans_file=plans, elicitation_style="request", payment_wait_seconds=30
    ) as service:
        await service.add_user("oto")
        token = (await service.personal_token("oto")).secret
        bought: list[asyncio.Task[str]] = []
        urls: list[str] = []

        async def accept(params: t.ElicitRequestURLParams) -> t.ElicitResult:
            urls.append(params.url)
            return t.ElicitResult(action="accept")

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if not bought:  # the user pays once the call is waiting for it
                bought.append(asyncio.create_task(buy_credits(service, urls[0], "oto", "calls_3")))

        async with probed_client(service.mcp_url, token, ClientProbe(answer=accept), mode="legacy") as client:
            result = await client.call_tool("sql_explain", QUERY, progress_callback=on_progress)
        await asyncio.gather(*bought)
        assert not result.is_error, result
        assert await balance_of(service) == 2, "the waiting call spent one of the three credits"
