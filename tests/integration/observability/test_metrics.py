"""/metrics: the series an operator needs, and that they move with real traffic."""

from __future__ import annotations

from datetime import timedelta

import httpx
import mcp_types as t
from sqlmodel import col, update

from service.db.metadata import utcnow
from service.paywall.models import Elicitation
from stripe_sandbox import sign_webhook_payload
from tests.integration.observability.observed import (
    CHART_ARGS,
    paid_legacy_flow,
    scrape,
)
from tests.support.mcp_clients import ClientProbe, call_expecting_32042, probed_client
from tests.support.payment import pay
from tests.support.polling import until
from tests.support.servers import bound_socket, port_of
from tests.support.service import RunningService, make_settings, run_service, run_service_on

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
REQUIRED_FAMILIES = (
    "mcp_tool_calls_total",
    "paywall_elicitations_created_total",
    "paywall_elicitations_completed_total",
    "paywall_elicitations_expired_total",
    "paywall_checkout_sessions_created_total",
    "stripe_webhooks_total",
    "paywall_webhook_to_completion_seconds_count",
    "mcp_legacy_sessions_open",
    "paywall_entitlement_check_seconds_count",
)


async def test_fresh_service_exports_every_series_at_zero(service: RunningService) -> None:
    samples = await scrape(service.base_url)
    names = {name for name, _ in samples}
    for family in REQUIRED_FAMILIES:
        # Labelled by event type and plan: these appear with the first webhook and checkout.
        if family not in ("stripe_webhooks_total", "paywall_checkout_sessions_created_total"):
            assert family in names, family
    assert samples.value("mcp_tool_calls_total", tool="ascii_chart", outcome="elicitation") == 0
    assert samples.value("paywall_elicitations_created_total", era=LEGACY, plan="pro") == 0
    assert samples.value("mcp_legacy_sessions_open") == 0


async def test_a_paid_legacy_flow_moves_every_metric(service: RunningService) -> None:
    flow = await paid_legacy_flow(service, "ada")
    await service.sandbox.deliver_pending(within=10)
    samples = await scrape(service.base_url)

    assert flow.during.value("mcp_legacy_sessions_open") >= 1, "the client's session is open"
    assert samples.value("mcp_tool_calls_total", tool="ascii_chart", outcome="elicitation") == 1
    assert samples.value("mcp_tool_calls_total", tool="ascii_chart", outcome="ok") == 1
    assert samples.value("mcp_tool_calls_total", tool="ascii_chart", outcome="error") == 0
    assert samples.value("mcp_tool_call_duration_seconds_count", tool="ascii_chart") == 2
    assert samples.value("paywall_elicitations_created_total", era=LEGACY, plan="pro") == 1
    assert samples.value("paywall_elicitations_completed_total", era=LEGACY, plan="pro") == 1
    assert samples.value("paywall_elicitations_created_total", era=MODERN, plan="pro") == 0
    assert samples.value("paywall_checkout_sessions_created_total", plan="pro") == 1
    assert samples.value("stripe_webhooks_total", type="checkout.session.completed", outcome="applied") == 1
    assert samples.total("stripe_webhooks_total") >= 2, "the subscription and invoice events count too"
    assert samples.value("paywall_webhook_to_completion_seconds_count") >= 1
    assert samples.value("paywall_webhook_to_completion_seconds_sum") > 0
    # Both calls miss the cache: the first is the user's first, the completion invalidated the second.
    assert samples.value("paywall_entitlement_check_seconds_count", source="database") >= 2


async def test_modern_era_counts_by_era_and_outcome(service: RunningService) -> None:
    await service.add_user("kai")
    token = (await service.personal_token("kai")).secret

    async def pay_then_accept(params: t.ElicitRequestURLParams) -> t.ElicitResult:
        await pay(service, params.url, "kai")
        return t.ElicitResult(action="accept")

    async with probed_client(service.mcp_url, token, ClientProbe(answer=pay_then_accept)) as client:
        assert client.protocol_version == MODERN
        result = await client.call_tool("sql_explain", {"query": "select 1"})
    assert not result.is_error, result

    # The retried call can run once the entitlement is visible, before the webhook's handler has
    # marked the elicitation completed and counted it.
    async def completion_counted() -> bool:
        samples = await scrape(service.base_url)
        return samples.value("paywall_elicitations_completed_total", era=MODERN, plan="pro") >= 1

    await until(completion_counted, "the elicitation's completion is counted")
    samples = await scrape(service.base_url)
    assert samples.value("mcp_tool_calls_total", tool="sql_explain", outcome="elicitation") == 1
    assert samples.value("mcp_tool_calls_total", tool="sql_explain", outcome="ok") == 1
    assert samples.value("paywall_elicitations_created_total", era=MODERN, plan="pro") == 1
    assert samples.value("paywall_elicitations_completed_total", era=MODERN, plan="pro") == 1
    assert samples.value("mcp_legacy_sessions_open") == 0, "2026-07-28 opens no session"


async def test_free_tools_errors_and_unknown_tools(service: RunningService) -> None:
    await service.add_user("bo")
    token = (await service.personal_token("bo")).secret
    async with service.mcp_client(token, mode="legacy") as client:
        assert not (await client.call_tool("whoami", {})).is_error
        no_such = await client.call_tool("no_such_tool", {})
        # A client without URL elicitation gets the payment link as a tool error: still a prompt.
        linked = await client.call_tool("ascii_chart", CHART_ARGS)
    assert no_such.is_error and linked.is_error
    samples = await scrape(service.base_url)
    assert samples.value("mcp_tool_calls_total", tool="whoami", outcome="ok") == 1
    assert samples.value("mcp_tool_calls_total", tool="unknown", outcome="error") == 1
    assert samples.value("mcp_tool_calls_total", tool="ascii_chart", outcome="elicitation") == 1
    assert not [name for (name, labels) in samples if ("tool", "no_such_tool") in labels]


async def test_expiry_is_counted_by_era(database_url: str) -> None:
    # The link is expired behind the service's back: its memory of the link would hand it out again.
    async with run_service(database_url, payment_link_cache_seconds=0) as service:
        await expiry_is_counted_by_era(service)


async def expiry_is_counted_by_era(service: RunningService) -> None:
    await service.add_user("cy")
    token = (await service.personal_token("cy")).secret
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
        first = (await call_expecting_32042(client, "ascii_chart", CHART_ARGS)).url
        async with service.runtime.sessions() as session, session.begin():
            await session.exec(
                update(Elicitation)
                .where(col(Elicitation.id) == first.rsplit("/", 1)[1])
                .values(expires_at=utcnow() - timedelta(minutes=1))
            )
        second = (await call_expecting_32042(client, "ascii_chart", CHART_ARGS)).url
    assert second != first
    samples = await scrape(service.base_url)
    assert samples.value("paywall_elicitations_expired_total", era=LEGACY, plan="pro") == 1
    assert samples.value("paywall_elicitations_created_total", era=LEGACY, plan="pro") == 2


async def test_webhook_outcomes(service: RunningService) -> None:
    body = b'{"id": "evt_x", "object": "event", "type": "checkout.session.completed"}'
    async with service.http() as http:
        unsigned = await http.post("/webhooks/stripe", content=body)
        forged = await http.post(
            "/webhooks/stripe",
            content=body,
            headers={"Stripe-Signature": sign_webhook_payload(body, "whsec_forged", 1)},
        )
    assert unsigned.status_code == forged.status_code == 400
    samples = await scrape(service.base_url)
    assert samples.value("stripe_webhooks_total", type="unknown", outcome="rejected") == 2


async def test_metrics_can_be_turned_off(database_url: str) -> None:
    async with run_service(database_url, metrics_enabled=False) as service, service.http() as http:
        assert (await http.get("/metrics")).status_code == 404


async def test_metrics_on_a_port_of_their_own(database_url: str) -> None:
    listener = bound_socket()  # handed to the app, as `serve --metrics-fd` does: no port to race for
    metrics_port = port_of(listener)
    sock = bound_socket()
    settings = make_settings(database_url, port_of(sock))
    assert settings.observability.metrics_port == 0
    async with run_service_on(settings, sock, metrics_listener=listener) as service:
        async with service.http() as http:
            main = await http.get("/metrics")
            assert main.status_code != 200 or "mcp_tool_calls_total" not in main.text
        samples = await scrape(f"http://127.0.0.1:{metrics_port}")
        assert samples.value("mcp_legacy_sessions_open") == 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{metrics_port}") as http:
            assert (await http.get("/mcp")).status_code == 404, "the metrics port serves nothing else"
    assert listener.fileno() == -1, "the app closes the listener it was handed when it stops"
