"""The built-in Stripe sandbox, served on its own loopback port while the service runs.

Its own port (not a path on the service) keeps it a separate origin, like Stripe, and lets the
service sync plans into it during start-up, before the service itself accepts connections.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from service.settings import StripeSandboxSettings, StripeSettings
from service.stripe_sandbox import Sandbox, SandboxConfig, create_sandbox_app
from service.web.background_server import bind_loopback, port_of, serve_in_background


@dataclass(frozen=True)
class EmbeddedSandbox:
    api_base: str
    sandbox: Sandbox


@asynccontextmanager
async def embedded_sandbox(
    sandbox: StripeSandboxSettings, stripe: StripeSettings, service_base_url: str
) -> AsyncIterator[EmbeddedSandbox]:
    """Serve the sandbox, posting its webhooks to this service at `service_base_url` over loopback."""
    sock = bind_loopback(sandbox.port)
    base = f"http://127.0.0.1:{port_of(sock)}"
    app = create_sandbox_app(
        SandboxConfig(
            api_key=stripe.secret_key.get_secret_value(),
            public_base_url=base,
            webhook_endpoints=[(f"{service_base_url}/webhooks/stripe", stripe.webhook_secrets[0])],
            persist_path=sandbox.state_file,
            adversarial=sandbox.adversarial,
            webhook_retry_schedule=sandbox.webhook_retry_schedule,
            webhook_ordered=sandbox.webhook_ordered,
            rate_limit=sandbox.rate_limit,
        )
    )
    async with serve_in_background(app, sock):
        yield EmbeddedSandbox(api_base=base, sandbox=app.state.sandbox)
