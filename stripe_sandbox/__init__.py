"""A local stand-in for the parts of the Stripe API the service uses ("the Stripe sandbox").

The service talks to it only through stripe-python, so switching to real test-mode keys changes
configuration, not code::

    from stripe_sandbox import SandboxConfig, create_sandbox_app

    app = create_sandbox_app(SandboxConfig(
        api_key="sk_test_sandbox",
        public_base_url="http://127.0.0.1:8000/stripe-sandbox",
        webhook_endpoints=[("http://127.0.0.1:8000/webhooks/stripe", "whsec_...")],
    ))
    client = stripe.StripeClient(
        "sk_test_sandbox",
        base_addresses={  # a path prefix works; the v2 meter event stream is served there too
            "api": "http://127.0.0.1:8000/stripe-sandbox",
            "meter_events": "http://127.0.0.1:8000/stripe-sandbox",
        },
        http_client=stripe.HTTPXClient(allow_sync_methods=False),
    )

Serving it:

- standalone, `uvicorn` on its own port: the app's ASGI lifespan starts webhook delivery;
- mounted in the service (`Mount("/stripe-sandbox", app)`): a mounted app's lifespan does not
  run, so the host must enter the sandbox's context in its own lifespan::

      sandbox = sandbox_app.state.sandbox
      async with sandbox.running():   # webhook worker + its httpx.AsyncClient
          yield

  Without it the API works but webhooks queue up undelivered. A mounted sandbox that posts
  webhooks to its own host needs that host to serve concurrently (uvicorn does).

Nothing is created at import time; every `create_sandbox_app` call makes an independent sandbox.
`app.state.sandbox` exposes `clock` (`now()`, `advance(seconds)`), `deliver_pending(timeout)`,
`set_renewal_failure(customer, fail)`, the webhook `attempts` log and `meter_errors` (meter events
accepted but dropped, with Stripe's error codes) for tests.

Objects are shaped for the API version stripe-python 16.1 pins (`API_VERSION`): billing periods are
on subscription items, invoices reach their subscription via `parent.subscription_details` and their
payments via `invoice_payment` objects (`invoice.subscription`, `invoice.charge` and
`invoice.payment_intent` do not exist any more). Stripe's own test helpers are emulated (test
clocks under `/v1/test_helpers/test_clocks`, `pm_card_*` payment methods, test cards); a few
sandbox-only helpers live beside them under `/v1/test_helpers/` (see `test_helpers`). Parameters
the sandbox does not implement answer 400 rather than being ignored (`params_implemented`);
docs/stripe-sandbox.md lists what is emulated.
"""

from .app import create_sandbox_app
from .config import API_VERSION, SandboxConfig
from .sandbox import Sandbox
from .webhooks import sign as sign_webhook_payload

__all__ = ["API_VERSION", "Sandbox", "SandboxConfig", "create_sandbox_app", "sign_webhook_payload"]
