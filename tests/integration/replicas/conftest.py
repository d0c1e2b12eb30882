"""Three replicas on one PostgreSQL database, and one Stripe sandbox whose webhooks go to replica B."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from dataclasses import dataclass
from pathlib import Path

import pytest
import stripe

from service.billing.plans import DEFAULT_PLANS_FILE, PlanCatalog
from service.billing.stripe_gateway import StripeGateway
from stripe_sandbox import Sandbox, SandboxConfig, create_sandbox_app
from tests.support.databases import DatabaseTemplates
from tests.support.replicas import Replica, replicas
from tests.support.servers import ReservedPort, bound_socket, port_of, serve

STRIPE_KEY = "sk_test_replicas"
WEBHOOK_SECRET = "whsec_replicas"


@dataclass
class Cluster:
    a: Replica
    b: Replica
    c: Replica
    sandbox: Sandbox
    stripe: stripe.StripeClient
    database_url: str


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


CALL_FAILED = pytest.StashKey[bool]()


@pytest.fixture
async def cluster(
    pg_templates: DatabaseTemplates, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Cluster]:
    database_url = pg_templates.fresh_url(tmp_path)
    reserved = {name: ReservedPort() for name in "abc"}
    ports = {name: reservation.port for name, reservation in reserved.items()}
    stripe_socket = bound_socket()
    stripe_base = f"http://127.0.0.1:{port_of(stripe_socket)}"
    sandbox_app = create_sandbox_app(
        SandboxConfig(
            api_key=STRIPE_KEY,
            public_base_url=stripe_base,
            webhook_endpoints=[(f"http://127.0.0.1:{ports['b']}/webhooks/stripe", WEBHOOK_SECRET)],
            webhook_retry_base=0.2,
            webhook_retry_max_delay=2.0,
            webhook_max_attempts=80,  # about three minutes of retries: enough for a slow restart
            webhook_timeout=5.0,
        )
    )
    gateway = StripeGateway.create(STRIPE_KEY, stripe_base, PlanCatalog.load(DEFAULT_PLANS_FILE))
    env = {
        "DATABASE_URL": database_url,
        # One public address for all, as behind a load balancer; each replica also answers on its own port.
        "PUBLIC_BASE_URL": f"http://127.0.0.1:{ports['a']}",
        "STRIPE_SECRET_KEY": STRIPE_KEY,
        "STRIPE_API_BASE": stripe_base,
        "STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "RECONCILE_INTERVAL_SECONDS": "0",
        # No sweeps: these tests see completions travel by NOTIFY alone (one test turns sweeps on).
        "COMPLETION_SWEEP_SECONDS": "0",
    }
    a, b, c = made = [
        Replica(
            name,
            reservation,
            {**env, "LOG_LEVEL": "INFO"},
            gateway.client,
            log_path=tmp_path / f"replica-{name}.log",
        )
        for name, reservation in reserved.items()
    ]
    try:
        async with serve(sandbox_app, stripe_socket):
            await gateway.sync_plans()
            async with replicas(*made):
                yield Cluster(
                    a,
                    b,
                    c,
                    sandbox=sandbox_app.state.sandbox,
                    stripe=gateway.client,
                    database_url=database_url,
                )
    finally:
        await gateway.aclose()
        for reservation in reserved.values():
            reservation.close()
        pg_templates.discard(database_url)
        if request.node.stash.get(CALL_FAILED, False):
            # CI shows only pytest's output: put what each replica logged next to the failure.
            for replica in made:
                print(f"----- replica {replica.name} log -----\n{replica.log()[-20000:]}")
            print(f"----- sandbox webhook attempts -----\n{sandbox_app.state.sandbox.webhooks.attempts!r}")
