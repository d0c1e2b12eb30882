"""/metrics after a paid call: process, build, webhook, Stripe, reconciliation, pool, bus, HTTP."""

from __future__ import annotations

import asyncio
import time

import mcp_types as t
import pytest
import stripe

from service import __version__
from service.billing.plans import DEFAULT_PLANS_FILE, PlanCatalog
from tests.integration.observability.observed import CHART_ARGS, Samples, scrape
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.payment import checkout_session_id, open_checkout, pay_checkout_session
from tests.support.service import RunningService, run_service

LEGACY = "2025-11-25"


async def paid_call_waiting_for_payment(service: RunningService, username: str) -> float:
    """A 2025-11-25 call that asks for payment with elicitation/create and waits inside the call
    while the user pays; returns a stretch of that wait as the client saw it (seconds)."""
    await service.add_user(username)
    token = (await service.personal_token(username)).secret
    urls: list[str] = []
    paid: list[asyncio.Task[None]] = []
    answered: list[float] = []
    checkout_opened: list[float] = []

    async def accept(params: t.ElicitRequestURLParams) -> t.ElicitResult:
        urls.append(params.url)
        answered.append(time.perf_counter())
        return t.ElicitResult(action="accept")

    async def pay_now() -> None:
        started = await open_checkout(service, urls[0], username)
        assert started.status_code == 303, started.text
        # Nothing is paid yet, so the call is still waiting.
        checkout_opened.append(time.perf_counter())
        await pay_checkout_session(service.stripe, checkout_session_id(started.headers["location"]))

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if not paid:  # the call is waiting: the user pays now
            paid.append(asyncio.create_task(pay_now()))

    async with probed_client(service.mcp_url, token, ClientProbe(answer=accept), mode="legacy") as client:
        result = await client.call_tool("ascii_chart", CHART_ARGS, progress_callback=on_progress)
    await asyncio.gather(*paid)
    assert not result.is_error, result
    return checkout_opened[0] - answered[0]


def route_labels(samples: Samples) -> set[str]:
    return {
        value
        for (name, labels) in samples
        for key, value in labels
        if name == "http_requests_total" and key == "route"
    }


async def test_an_operator_sees_every_figure_after_a_paid_call(database_url: str) -> None:
    started_at = time.time()
    async with run_service(database_url, elicitation_style="request", payment_wait_seconds=30) as service:
        waited = await paid_call_waiting_for_payment(service, "opa")
        await service.sandbox.deliver_pending(within=10)
        report = await service.runtime.reconciler.run()
        assert report.ran
        with pytest.raises(stripe.InvalidRequestError):
            await service.runtime.stripe.retrieve_subscription("sub_missing")
        async with service.http() as http:
            assert (await http.get("/readyz")).status_code == 200
            assert (await http.get("/no/such/page")).status_code == 404
        on_postgres = service.runtime.engine.dialect.name == "postgresql"
        if on_postgres:
            listening = getattr(service.runtime.bus, "listening")  # noqa: B009 - PostgresBus only
            await listening.wait()
        samples = await scrape(service.base_url)

    # The process, the interpreter and the build.
    assert samples.value("process_resident_memory_bytes") > 0
    assert samples.value("process_open_fds") > 0
    assert samples.total("python_gc_collections_total") > 0
    assert samples.total("python_info") == 1
    assert samples.value("paid_mcp_build_info", version=__version__) == 1

    # Webhooks: how late events arrive, when the last one did, how long each took, the queue.
    assert samples.value("stripe_webhook_event_age_seconds_count") >= 1
    assert samples.value("stripe_webhook_event_age_seconds_sum") >= 0
    assert started_at <= samples.value("stripe_webhook_last_received_timestamp_seconds") <= time.time()
    assert samples.value("stripe_webhook_processing_seconds_count", type="checkout.session.completed") == 1
    assert samples.total("stripe_webhook_processing_seconds_count") == samples.value(
        "stripe_webhook_event_age_seconds_count"
    ), "every signed event is timed"
    assert ("stripe_webhook_commit_queue_depth", frozenset()) in samples
    assert samples.value("stripe_webhook_commit_queue_depth") == 0

    # Stripe API calls by operation, and the one that failed.
    for operation in (
        "create_customer",
        "create_checkout_session",
        "retrieve_subscription",
        "list_checkout_sessions",
    ):
        assert samples.value("stripe_api_request_duration_seconds_count", operation=operation) >= 1, operation
    assert (
        samples.value(
            "stripe_api_errors_total", operation="retrieve_subscription", error="InvalidRequestError"
        )
        == 1
    )
    assert (
        samples.value(
            "stripe_api_errors_total", operation="create_checkout_session", error="InvalidRequestError"
        )
        == 0
    )

    # Reconciliation: one run, nothing to repair, its success time.
    assert samples.value("stripe_reconcile_runs_total", outcome="ran") == 1
    assert samples.value("stripe_reconcile_runs_total", outcome="error") == 0
    assert ("stripe_reconcile_repairs_total", frozenset()) in samples
    assert samples.value("stripe_reconcile_repairs_total") == 0
    assert started_at <= samples.value("stripe_reconcile_last_success_timestamp_seconds") <= time.time()

    # The funnel by plan: the cheapest plan unlocking ascii_chart was offered and bought.
    plan = PlanCatalog.load(DEFAULT_PLANS_FILE).plans_unlocking("ascii_chart")[0].id
    assert samples.value("paywall_elicitations_created_total", era=LEGACY, plan=plan) == 1
    assert samples.value("paywall_elicitations_completed_total", era=LEGACY, plan=plan) == 1
    assert samples.value("paywall_checkout_sessions_created_total", plan=plan) == 1

    # The tool's own time leaves out the wait for the payment; the call's time includes it.
    execution = samples.value("mcp_tool_execution_seconds_sum", tool="ascii_chart", outcome="ok")
    assert samples.value("mcp_tool_execution_seconds_count", tool="ascii_chart", outcome="ok") == 1
    call = samples.value("mcp_tool_call_duration_seconds_sum", tool="ascii_chart")
    assert samples.value("mcp_tool_call_duration_seconds_count", tool="ascii_chart") == 1
    assert 0 < waited <= call - execution, (waited, call, execution)

    # HTTP requests by route template and status, never by raw path.
    assert samples.value("http_requests_total", method="GET", route="/readyz", status="200") == 1
    assert samples.value("http_requests_total", method="POST", route="/mcp", status="200") >= 2
    assert samples.value("http_requests_total", method="POST", route="/webhooks/stripe", status="200") >= 1
    assert samples.value("http_requests_total", method="GET", route="other", status="404") == 1
    routes = route_labels(samples)
    assert "/pay/{elicitation_id}" in routes
    assert not [route for route in routes if "el_" in route or "no/such" in route], routes

    # The pool and, on PostgreSQL only, the completion bus's connection and the decisions' queue.
    assert samples.value("db_pool_max_connections") == (30 if on_postgres else 1)
    assert 0 <= samples.value("db_pool_checked_out_connections") <= samples.value("db_pool_max_connections")
    postgres_only = (
        "paywall_completion_bus_connected",
        "paywall_usage_decisions_in_flight",
        "paywall_usage_decisions_waiting",
    )
    if on_postgres:
        assert samples.value("paywall_completion_bus_connected") == 1
        assert samples.value("paywall_usage_decisions_in_flight") == 0
        assert samples.value("paywall_usage_decisions_waiting") == 0
    else:
        assert not [name for name in postgres_only if (name, frozenset()) in samples]
