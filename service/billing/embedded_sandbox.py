"""The built-in Stripe sandbox, served on its own loopback port while the service runs.

Its own port (not a path on the service) keeps it a separate origin, like Stripe, and lets the
service sync plans into it during start-up, before the service itself accepts connections.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from service.settings import Settings
from service.web.background_server import bind_loopback, port_of, serve_in_background
from stripe_sandbox import Sandbox, SandboxConfig, create_sandbox_app


@dataclass(frozen=True)
class EmbeddedSandbox:
    api_base: str
    sandbox: Sandbox


@asynccontextmanager
async def embedded_sandbox(settings: Settings) -> AsyncIterator[EmbeddedSandbox]:
    sock = bind_loopback(settings.stripe_sandbox_port)
    base = f"http://127.0.0.1:{port_of(sock)}"
    app = create_sandbox_app(
        SandboxConfig(
            api_key=settings.stripe_secret_key.get_secret_value(),
            public_base_url=base,
            webhook_endpoints=[
                (f"{settings.internal_base_url}/webhooks/stripe", settings.stripe_webhook_secret[0])
            ],
            persist_path=settings.stripe_sandbox_state_file,
            adversarial=settings.stripe_sandbox_adversarial,
            webhook_retry_schedule=settings.stripe_sandbox_webhook_retry_schedule,
            webhook_ordered=settings.stripe_sandbox_webhook_ordered,
            rate_limit=settings.stripe_sandbox_rate_limit,
        )
    )
    async with serve_in_background(app, sock):
        yield EmbeddedSandbox(api_base=base, sandbox=app.state.sandbox)
