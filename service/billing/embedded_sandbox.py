"""The built-in Stripe sandbox, served on its own loopback port while the service runs.

Its own port (not a path on the service) keeps it a separate origin, like Stripe, and lets the
service sync plans into it during start-up, before the service itself accepts connections.

The sandbox is the `stripe_sandbox` package of the optional `sandbox` extra; without it, settings
that ask for the embedded sandbox are refused with `SANDBOX_MISSING`, not an ImportError.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from starlette.applications import Starlette

from service.settings import ConfigurationError, StripeSandboxSettings, StripeSettings
from service.web.background_server import bind_loopback, port_of, serve_in_background

try:
    from stripe_sandbox import Sandbox, SandboxConfig, create_sandbox_app
except ModuleNotFoundError as exc:  # the `sandbox` extra is not installed
    if exc.name != "stripe_sandbox":
        raise
    SANDBOX_INSTALLED = False
else:
    SANDBOX_INSTALLED = True

SANDBOX_EXTRA = "pip install 'paid-mcp-service[sandbox]'"
SANDBOX_MISSING = (
    f"the built-in Stripe sandbox is not installed: install the `sandbox` extra ({SANDBOX_EXTRA}; "
    "`make install` does)"
)


class SandboxNotInstalled(ConfigurationError):
    """The settings ask for the built-in Stripe sandbox, and the `sandbox` extra is not installed."""


def sandbox_problem(stripe: StripeSettings) -> str | None:
    """Why `serve` cannot start with these settings for want of the sandbox, or None."""
    if stripe.embedded_sandbox and not SANDBOX_INSTALLED:
        return (
            f"{SANDBOX_MISSING}, or set STRIPE_SECRET_KEY to a Stripe key instead of the sandbox's "
            "(with STRIPE_API_BASE for a sandbox run elsewhere)"
        )
    return None


def create_app_for_settings(
    sandbox: StripeSandboxSettings, stripe: StripeSettings, public_base_url: str, webhook_urls: Sequence[str]
) -> Starlette:
    """The sandbox's app, configured by the service's `STRIPE_*` settings."""
    if not SANDBOX_INSTALLED:
        raise SandboxNotInstalled(SANDBOX_MISSING)
    secret = stripe.webhook_secrets[0]
    return create_sandbox_app(
        SandboxConfig(
            api_key=stripe.secret_key.get_secret_value(),
            public_base_url=public_base_url,
            webhook_endpoints=[(url, secret) for url in webhook_urls],
            persist_path=sandbox.state_file,
            adversarial=sandbox.adversarial,
            webhook_retry_schedule=sandbox.webhook_retry_schedule,
            webhook_ordered=sandbox.webhook_ordered,
            rate_limit=sandbox.rate_limit,
        )
    )


@dataclass(frozen=True)
class EmbeddedSandbox:
    api_base: str
    sandbox: Sandbox


@asynccontextmanager
async def embedded_sandbox(
    sandbox: StripeSandboxSettings, stripe: StripeSettings, service_base_url: str
) -> AsyncIterator[EmbeddedSandbox]:
    """Serve the sandbox, posting its webhooks to this service at `service_base_url` over loopback."""
    if problem := sandbox_problem(stripe):
        raise SandboxNotInstalled(problem)
    sock = bind_loopback(sandbox.port)
    base = f"http://127.0.0.1:{port_of(sock)}"
    app = create_app_for_settings(sandbox, stripe, base, [f"{service_base_url}/webhooks/stripe"])
    async with serve_in_background(app, sock):
        yield EmbeddedSandbox(api_base=base, sandbox=app.state.sandbox)
