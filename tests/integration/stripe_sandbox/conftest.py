"""Fixtures: a real sandbox behind uvicorn, a real webhook receiver, and a StripeClient.

Everything talks real HTTP on 127.0.0.1, on sockets bound before the servers start. Servers run
as tasks on the test's event loop, so tests can await sandbox helpers (e.g. `deliver_pending`)
directly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import pytest
import stripe
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from stripe_sandbox import Sandbox, SandboxConfig, create_sandbox_app
from tests.support.servers import bound_socket, port_of, serve
from tests.support.stripe_objects import unexpanded

API_KEY = "sk_test_sandbox"
WEBHOOK_SECRET = "whsec_test_receiver_secret"
# Stripe's example objects from stripe/openapi (MIT, see tests/fixtures/stripe/LICENSE).
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "stripe" / "fixtures3.json"


@dataclass
class Receiver:
    """A webhook endpoint that verifies every delivery with stripe-python."""

    secret: str = WEBHOOK_SECRET
    fail_first: bool = False
    fail_attempts: int = 0  # answer 500 to this many deliveries of each event before accepting it
    slow_first: float = 0.0
    events: list[stripe.Event] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[tuple[str, int]] = field(default_factory=list)
    rejected: int = 0
    url: str = ""
    _seen: set[str] = field(default_factory=set)
    _tries: dict[str, int] = field(default_factory=dict)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def endpoint(self, request: Request) -> Response:
        payload = await request.body()
        try:
            event = stripe.Webhook.construct_event(
                payload, request.headers.get("stripe-signature"), self.secret
            )
        except (stripe.SignatureVerificationError, ValueError):
            self.rejected += 1
            async with self._changed:
                self._changed.notify_all()
            return Response("bad signature", status_code=400)
        first = event.id not in self._seen
        self._seen.add(event.id)
        self._tries[event.id] = tries = self._tries.get(event.id, 0) + 1
        if first and self.slow_first:
            await asyncio.sleep(self.slow_first)  # simulating a slow endpoint, not synchronising
        status = 500 if (first and self.fail_first) or tries <= self.fail_attempts else 200
        self.statuses.append((event.id, status))
        if status == 200:
            self.events.append(event)
            self.bodies.append(json.loads(payload))
        async with self._changed:
            self._changed.notify_all()
        return Response("ok" if status == 200 else "try again", status_code=status)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    async def wait_for(self, predicate: Callable[[Receiver], bool], within: float = 10.0) -> None:
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/webhooks/stripe", self.endpoint, methods=["POST"])])


@dataclass
class Env:
    client: stripe.StripeClient
    sandbox: Sandbox
    base_url: str
    receiver: Receiver

    async def raw(self, path: str, **params: Any) -> stripe.StripeObject:
        response = await self.client.raw_request_async("post", path, **params)
        return self.client.deserialize(response, api_mode="V1")

    async def advance(self, seconds: int) -> stripe.StripeObject:
        return await self.raw("/v1/test_helpers/sandbox/advance", seconds=seconds)


@asynccontextmanager
async def stripe_client(base_url: str, api_key: str = API_KEY) -> AsyncIterator[stripe.StripeClient]:
    """The client exactly as the service builds it (async httpx), closed afterwards."""
    http_client = stripe.HTTPXClient(allow_sync_methods=False)
    try:
        yield stripe.StripeClient(
            api_key,
            base_addresses={"api": base_url, "meter_events": base_url},
            http_client=http_client,
            max_network_retries=0,
        )
    finally:
        await http_client.close_async()  # type: ignore[no-untyped-call]  # unannotated in stripe-python


@asynccontextmanager
async def sandbox_env(receiver: Receiver, **config: Any) -> AsyncIterator[Env]:
    async with serve(receiver.app(), bound_socket()) as receiver_base:
        receiver.url = f"{receiver_base}/webhooks/stripe"
        sock = bound_socket()
        port = port_of(sock)
        sandbox_config = SandboxConfig(
            api_key=API_KEY,
            public_base_url=f"http://127.0.0.1:{port}",
            webhook_endpoints=[(receiver.url, receiver.secret)],
            webhook_timeout=config.pop("webhook_timeout", 2.0),
            webhook_retry_base=config.pop("webhook_retry_base", 0.05),
            **config,
        )
        app = create_sandbox_app(sandbox_config)
        async with serve(app, sock) as base, stripe_client(base) as client:
            yield Env(client, app.state.sandbox, base, receiver)


@pytest.fixture
def receiver() -> Receiver:
    return Receiver()


@pytest.fixture
async def env(receiver: Receiver) -> AsyncIterator[Env]:
    async with sandbox_env(receiver) as environment:
        yield environment


async def catalog(
    env: Env, *, lookup_key: str = "pro_monthly", amount: int = 1500
) -> tuple[stripe.Product, stripe.Price]:
    product = await env.client.v1.products.create_async(params={"name": "Pro plan"})
    price = await env.client.v1.prices.create_async(
        params={
            "product": product.id,
            "currency": "usd",
            "unit_amount": amount,
            "recurring": {"interval": "month"},
            "lookup_key": lookup_key,
        }
    )
    return product, price


class Subscribed(TypedDict):
    price: stripe.Price
    customer: stripe.Customer
    session: stripe.checkout.Session
    subscription: stripe.Subscription


async def subscribed(
    env: Env, *, card: str = "4242424242424242", email: str = "ada@example.com"
) -> Subscribed:
    """Customer + paid subscription through a checkout session (paid via the test helper)."""
    _product, price = await catalog(env)
    customer = await env.client.v1.customers.create_async(params={"email": email})
    session = await env.client.v1.checkout.sessions.create_async(
        params={
            "mode": "subscription",
            "customer": customer.id,
            "line_items": [{"price": price.id, "quantity": 1}],
            "success_url": "https://app.example/ok?session={CHECKOUT_SESSION_ID}",
            "cancel_url": "https://app.example/cancel",
            "subscription_data": {"metadata": {"account": "acct-1"}},
        }
    )
    await env.raw(f"/v1/test_helpers/checkout/sessions/{session.id}/pay", card_number=card)
    session = await env.client.v1.checkout.sessions.retrieve_async(session.id)
    sub = await env.client.v1.subscriptions.retrieve_async(unexpanded(session.subscription))
    return {"price": price, "customer": customer, "session": session, "subscription": sub}
