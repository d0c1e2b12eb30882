"""Reconciliation and event replay repair what missed webhooks left wrong; leases keep it single."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from mcp import MCPError, UrlElicitationRequiredError

from service.billing.leases import HeldLease, LeaseLost, release, try_acquire
from service.billing.models import JobLease, Subscription
from service.billing.stripe_sync.reconciler import LEASE_NAME
from service.cli_exit_codes import EXIT_LEASE_HELD
from service.paywall.models import Elicitation
from stripe_sandbox import SandboxConfig, create_sandbox_app
from tests.support.cli import run_cli
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.payment import answer_dispute, pay, pay_checkout_session
from tests.support.servers import bound_socket, port_of, serve
from tests.support.service import RunningService, make_settings, run_service_on
from tests.support.subscriptions import PAID_ARGS, PAID_TOOL, can_use_paid_tool, paid_tool_url

REPO_ROOT = Path(__file__).resolve().parents[3]
KEY = "sk_test_silent_stripe"


@pytest.fixture
async def silent_stripe_service(database_url: str) -> AsyncIterator[RunningService]:
    """A service whose Stripe never sends it a webhook: every event is 'missed'."""
    stripe_socket = bound_socket()
    base = f"http://127.0.0.1:{port_of(stripe_socket)}"
    silent = create_sandbox_app(SandboxConfig(api_key=KEY, public_base_url=base, webhook_endpoints=()))
    service_socket = bound_socket()
    settings = make_settings(
        database_url,
        port_of(service_socket),
        stripe_secret_key=KEY,
        stripe_api_base=base,
        retry_wait_seconds=0,
    )
    async with serve(silent, stripe_socket), run_service_on(settings, service_socket) as service:
        await service.runtime.stripe.sync_plans()
        yield service


async def test_reconciliation_grants_what_a_missed_webhook_would_have(
    silent_stripe_service: RunningService,
) -> None:
    service = silent_stripe_service
    await service.add_user("mia")
    token = (await service.personal_token("mia")).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool(PAID_TOOL, PAID_ARGS)
        [elicitation] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
        await pay(service, elicitation.url, "mia")
        assert await service.rows(Subscription) == [], "no webhook arrived"

        report = await service.runtime.reconciler.run()
        assert report.ran and report.repaired >= 1
        assert (report.checkouts, report.checkouts_current) == (1, 0), "the missed checkout is read"
        assert await probe.wait_for_completion() == elicitation.elicitation_id
        result = await client.call_tool(PAID_TOOL, PAID_ARGS)
    assert not result.is_error
    [row] = await service.rows(Elicitation)
    assert row.status == "completed"

    again = await service.runtime.reconciler.run()
    assert again.repaired == 0, "a second pass finds nothing to repair"
    assert (again.checkouts, again.checkouts_current) == (1, 1), "nor reads a reflected checkout again"
    assert again.subscriptions == 1, "the subscription itself is still re-read through its customer"
    completed = service.runtime.metrics.registry.get_sample_value(
        "paywall_elicitations_completed_total", {"era": "2025-11-25", "plan": "pro"}
    )
    assert completed == 1, "the completion is counted once, by the pass that made it"
    registry = service.runtime.metrics.registry
    assert registry.get_sample_value("stripe_reconcile_repairs_total") == report.repaired
    assert registry.get_sample_value("stripe_reconcile_runs_total", {"outcome": "ran"}) == 2
    assert (registry.get_sample_value("stripe_reconcile_last_success_timestamp_seconds") or 0) > 0


async def test_reconciliation_skips_checkouts_for_elicitations_it_does_not_have(
    silent_stripe_service: RunningService,
) -> None:
    """Another service on the same Stripe account: its paid checkouts are not ours to apply."""
    service = silent_stripe_service
    gateway = service.runtime.stripe
    price_id = await gateway.price_id(service.runtime.catalog.all()[0])
    customer = await service.stripe.v1.customers.create_async(params={"description": "elsewhere"})
    metadata = {"user_id": "usr_elsewhere", "elicitation_id": "el_elsewhere", "plan_id": "pro"}
    checkout = await service.stripe.v1.checkout.sessions.create_async(
        params={
            "mode": "subscription",
            "customer": customer.id,
            "client_reference_id": "usr_elsewhere",
            "line_items": [{"price": price_id, "quantity": 1}],
            "metadata": metadata,
            "success_url": "http://127.0.0.1:9/done",
        }
    )
    await pay_checkout_session(service.stripe, checkout.id)

    report = await service.runtime.reconciler.run()
    assert (report.checkouts, report.checkouts_current) == (1, 1)
    assert report.repaired == report.ignored == 0
    assert await service.rows(Subscription) == []


async def test_a_held_lease_renews_itself_between_steps(service: RunningService) -> None:
    sessions = service.runtime.sessions
    lease = HeldLease(sessions, "long-job", "replica-a", timedelta(0))  # due for renewal at once
    assert await lease.acquire()
    [before] = await service.rows(JobLease)
    await lease.keep()
    [after] = await service.rows(JobLease)
    assert after.holder == "replica-a"
    assert after.expires_at > before.expires_at, "renewed, not merely checked"


async def test_a_held_lease_taken_over_meanwhile_stops_the_job(service: RunningService) -> None:
    sessions = service.runtime.sessions
    lease = HeldLease(sessions, "long-job", "replica-a", timedelta(0))  # expired as soon as taken
    assert await lease.acquire()
    assert await try_acquire(sessions, "long-job", "replica-b", timedelta(minutes=10))
    with pytest.raises(LeaseLost):
        await lease.keep()
    [row] = await service.rows(JobLease)
    assert row.holder == "replica-b"
    await lease.release()
    [row] = await service.rows(JobLease)
    assert row.holder == "replica-b", "releasing a lost lease leaves the new holder's alone"


async def test_reconciliation_revokes_what_a_missed_cancellation_left(
    silent_stripe_service: RunningService,
) -> None:
    service = silent_stripe_service
    await service.add_user("noa")
    token = (await service.personal_token("noa")).secret
    url = await paid_tool_url(service, token)
    assert url is not None
    await pay(service, url, "noa")
    await service.runtime.reconciler.run()
    assert await can_use_paid_tool(service, token)
    [subscription] = await service.rows(Subscription)
    await service.stripe.v1.subscriptions.cancel_async(subscription.id)
    assert await can_use_paid_tool(service, token), "nobody told us yet"
    await service.runtime.reconciler.run()
    assert not await can_use_paid_tool(service, token)


async def test_reconciliation_gives_access_back_after_a_won_dispute(
    silent_stripe_service: RunningService,
) -> None:
    service = silent_stripe_service
    await service.add_user("ora")
    token = (await service.personal_token("ora")).secret
    url = await paid_tool_url(service, token)
    assert url is not None
    await pay(service, url, "ora")
    await service.runtime.reconciler.run()
    [subscription] = await service.rows(Subscription)
    charges = await service.stripe.v1.charges.list_async(params={"customer": subscription.customer_id})
    [charge] = charges.data
    await service.stripe.raw_request_async("post", f"/v1/test_helpers/charges/{charge.id}/dispute")
    await service.runtime.reconciler.run()
    assert not await can_use_paid_tool(service, token)

    await answer_dispute(service.stripe, charge.id, "winning_evidence")
    await service.runtime.reconciler.run()
    assert await can_use_paid_tool(service, token), "the vendor kept the payment"


async def cli(service: RunningService, *args: str) -> tuple[int, str, str]:
    env = {
        "DATABASE_URL": service.settings.database.url,
        "STRIPE_SECRET_KEY": KEY,
        "STRIPE_API_BASE": service.settings.stripe.api_base or "",
    }
    done = await run_cli(*args, env=env)
    return done.returncode, done.stdout, done.stderr


async def test_replay_events_applies_the_missed_ones_once(silent_stripe_service: RunningService) -> None:
    service = silent_stripe_service
    await service.add_user("ola")
    token = (await service.personal_token("ola")).secret
    url = await paid_tool_url(service, token)
    assert url is not None
    await pay(service, url, "ola")
    code, out, err = await cli(service, "stripe", "replay-events", "--since", "2000-01-01T00:00:00Z")
    assert code == 0, err
    assert "applied" in out
    [subscription] = await service.rows(Subscription)
    assert subscription.status == "active"
    code, out, err = await cli(service, "stripe", "replay-events", "--since", "2000-01-01T00:00:00Z")
    assert code == 0, err
    assert "applied" not in out and "duplicate" in out, "replaying twice changes nothing"
    code, out, err = await cli(service, "stripe", "reconcile")
    assert code == 0, err
    assert "repaired 0" in out


async def test_only_one_holder_gets_the_lease(service: RunningService) -> None:
    sessions = service.runtime.sessions
    ttl = timedelta(minutes=1)
    assert await try_acquire(sessions, "job", "replica-a", ttl)
    assert not await try_acquire(sessions, "job", "replica-b", ttl)
    assert await try_acquire(sessions, "job", "replica-a", ttl), "the holder may renew"
    await release(sessions, "job", "replica-a")
    assert await try_acquire(sessions, "job", "replica-b", ttl)
    results = await asyncio.gather(*(try_acquire(sessions, "race", f"r{i}", ttl) for i in range(5)))
    assert sum(results) == 1


async def test_the_commands_summarise_as_json_and_say_when_another_holds_the_lease(
    silent_stripe_service: RunningService,
) -> None:
    service = silent_stripe_service
    code, out, err = await cli(
        service, "stripe", "replay-events", "--since", "2000-01-01T00:00:00Z", "--json"
    )
    assert code == 0, err
    summary = json.loads(out)
    assert summary["events"] == sum(summary["outcomes"].values())
    code, out, err = await cli(service, "stripe", "reconcile", "--json")
    assert code == 0, err
    assert json.loads(out)["ran"] is True
    assert await try_acquire(service.runtime.sessions, LEASE_NAME, "another-replica", timedelta(minutes=5))
    code, out, err = await cli(service, "stripe", "reconcile", "--json")
    assert code == EXIT_LEASE_HELD, err
    assert json.loads(out)["ran"] is False


async def test_a_missing_sandbox_is_named_instead_of_stripes_support_address(database_url: str) -> None:
    nobody = bound_socket()  # bound, never listening: connections to it are refused
    port = port_of(nobody)
    env = {
        "DATABASE_URL": database_url,
        "STRIPE_SECRET_KEY": "sk_test_sandbox",
        "STRIPE_SANDBOX_PORT": str(port),
    }
    done = await run_cli("stripe", "reconcile", env=env, unset=("STRIPE_API_BASE",))
    nobody.close()
    assert done.returncode == 1
    message = done.stderr
    assert f"no Stripe sandbox at http://127.0.0.1:{port}" in message
    assert "support@stripe.com" not in message
