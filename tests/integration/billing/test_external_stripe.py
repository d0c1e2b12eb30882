"""Pointing the service at another Stripe is configuration only: a standalone sandbox as "real" Stripe.

The sandbox runs as its own server with its own key, like Stripe's API would; the service gets
`STRIPE_SECRET_KEY`, `STRIPE_API_BASE` and `STRIPE_WEBHOOK_SECRET`, exactly what production sets.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from mcp import MCPError, UrlElicitationRequiredError

from service.billing.models import Subscription
from service.billing.plans import DEFAULT_PLANS_FILE, PlanCatalog
from stripe_sandbox import SandboxConfig, create_sandbox_app
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.payment import pay
from tests.support.servers import bound_socket, port_of, serve
from tests.support.service import make_settings, run_service_on

REPO_ROOT = Path(__file__).resolve().parents[3]
EXTERNAL_KEY = "sk_test_external_account_51Abc"
WEBHOOK_SECRET = "whsec_external_endpoint_secret"


async def sync_plans(api_base: str, database_url: str) -> tuple[int, str, str]:
    """The CLI as a real subprocess; async, because the Stripe it talks to runs in this event loop."""
    env = {
        **os.environ,
        "STRIPE_SECRET_KEY": EXTERNAL_KEY,
        "STRIPE_API_BASE": api_base,
        "DATABASE_URL": database_url,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service",
        "stripe",
        "sync-plans",
        cwd=REPO_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_sync_plans_and_a_paid_call_against_another_stripe(database_url: str) -> None:
    service_socket = bound_socket()
    service_port = port_of(service_socket)
    stripe_socket = bound_socket()
    stripe_base = f"http://127.0.0.1:{port_of(stripe_socket)}"
    external_stripe = create_sandbox_app(
        SandboxConfig(
            api_key=EXTERNAL_KEY,
            public_base_url=stripe_base,
            webhook_endpoints=[(f"http://127.0.0.1:{service_port}/webhooks/stripe", WEBHOOK_SECRET)],
        )
    )
    async with serve(external_stripe, stripe_socket):
        code, out, err = await sync_plans(stripe_base, database_url)
        assert code == 0, err
        catalog = PlanCatalog.load(DEFAULT_PLANS_FILE)
        prices = len(catalog.all()) + len(catalog.metered_prices()) + len(catalog.credit_packs())
        assert out.count("created ") == prices
        assert "calls_100\tpaid_mcp_credits_100\t5.00 USD once" in out
        code, out, err = await sync_plans(stripe_base, database_url)
        assert code == 0, err
        assert out.count("exists ") == prices, "sync-plans is idempotent by lookup key"

        settings = make_settings(
            database_url,
            service_port,
            stripe_secret_key=EXTERNAL_KEY,
            stripe_api_base=stripe_base,
            stripe_webhook_secret=WEBHOOK_SECRET,
        )
        assert not settings.stripe.embedded_sandbox
        async with run_service_on(settings, service_socket) as service:
            assert service.runtime.sandbox is None
            await service.add_user("una")
            token = (await service.personal_token("una")).secret
            probe = ClientProbe()
            async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
                try:
                    await client.call_tool("ascii_chart", {"values": [1]})
                    raise AssertionError("expected -32042")
                except MCPError as exc:
                    [elicitation] = UrlElicitationRequiredError.from_error(exc.error).elicitations
                await pay(service, elicitation.url, "una")
                assert await probe.wait_for_completion() == elicitation.elicitation_id
                result = await client.call_tool("ascii_chart", {"values": [1]})
            assert not result.is_error
            [subscription] = await service.rows(Subscription)
            assert subscription.status == "active"


def test_sync_plans_reports_a_wrong_key(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "STRIPE_SECRET_KEY": "sk_test_wrong",
        "STRIPE_API_BASE": "http://127.0.0.1:1",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "service", "stripe", "sync-plans"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error:")


async def test_the_sandbox_runs_as_its_own_process(tmp_path: Path) -> None:
    listener = bound_socket()
    listener.listen()  # connections wait in its backlog until the sandbox serves them
    port = port_of(listener)
    env = {**os.environ, "STRIPE_SANDBOX_STATE_FILE": str(tmp_path / "sandbox.json")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service",
        "stripe",
        "sandbox",
        "--fd",
        str(listener.fileno()),
        pass_fds=(listener.fileno(),),
        cwd=REPO_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    listener.close()  # the sandbox serves on its own copy
    try:
        assert process.stdout is not None
        async with asyncio.timeout(30):
            while b"Application startup complete" not in (line := await process.stdout.readline()):
                assert line, "the sandbox process exited before serving"
        sync = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "service",
            "stripe",
            "sync-plans",
            cwd=REPO_ROOT,
            env={
                **env,
                "STRIPE_API_BASE": f"http://127.0.0.1:{port}",
                "DATABASE_URL": f"sqlite:///{tmp_path / 'd.db'}",
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(60):
            out, err = await sync.communicate()
        assert sync.returncode == 0, err.decode()
        catalog = PlanCatalog.load(DEFAULT_PLANS_FILE)
        prices = len(catalog.all()) + len(catalog.metered_prices()) + len(catalog.credit_packs())
        assert out.decode().count("created ") == prices
    finally:
        process.terminate()
        await process.wait()
    assert (tmp_path / "sandbox.json").exists(), "the sandbox persists its state on shutdown"
