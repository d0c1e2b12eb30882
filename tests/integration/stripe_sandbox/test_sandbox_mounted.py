"""The sandbox mounted under a path prefix in a host app, and persisted to a JSON file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount

from stripe_sandbox import SandboxConfig, create_sandbox_app
from tests.support.servers import bound_socket, port_of, serve

from .conftest import API_KEY, Receiver, stripe_client


async def test_mounted_under_prefix_with_host_lifespan(receiver: Receiver) -> None:
    async with serve(receiver.app(), bound_socket()) as receiver_base:
        sock = bound_socket()
        port = port_of(sock)
        sandbox_app = create_sandbox_app(
            SandboxConfig(
                api_key=API_KEY,
                public_base_url=f"http://127.0.0.1:{port}/stripe-sandbox",
                webhook_endpoints=[(f"{receiver_base}/webhooks/stripe", receiver.secret)],
                webhook_retry_base=0.05,
            )
        )
        sandbox = sandbox_app.state.sandbox

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            async with sandbox.running():  # a mounted app's own lifespan does not run
                yield

        host = Starlette(routes=[Mount("/stripe-sandbox", sandbox_app)], lifespan=lifespan)
        async with serve(host, sock) as base, stripe_client(f"{base}/stripe-sandbox") as client:
            product = await client.v1.products.create_async(params={"name": "Pro"})
            price = await client.v1.prices.create_async(
                params={
                    "product": product.id,
                    "currency": "usd",
                    "unit_amount": 100,
                    "recurring": {"interval": "month"},
                }
            )
            session = await client.v1.checkout.sessions.create_async(
                params={"mode": "subscription", "line_items": [{"price": price.id, "quantity": 1}]}
            )
            assert session.url == f"{base}/stripe-sandbox/c/pay/{session.id}"
            response = await client.raw_request_async(
                "post", f"/v1/test_helpers/checkout/sessions/{session.id}/pay", card_number="4242424242424242"
            )
            assert response.code == 200
            page = [
                p async for p in (await client.v1.prices.list_async(params={"limit": 1})).auto_paging_iter()
            ]
            assert [p.id for p in page] == [price.id]
            await sandbox.deliver_pending()
            assert "checkout.session.completed" in receiver.types() and receiver.rejected == 0


async def test_state_persists_to_json_file(tmp_path: Path) -> None:
    path = tmp_path / "sandbox.json"
    config = SandboxConfig(api_key=API_KEY, persist_path=path)
    async with serve(create_sandbox_app(config), bound_socket()) as base, stripe_client(base) as client:
        customer = await client.v1.customers.create_async(params={"email": "kept@example.com"})
        await client.raw_request_async("post", "/v1/test_helpers/sandbox/advance", seconds=3600)
    assert path.exists()
    restarted = create_sandbox_app(config)
    assert restarted.state.sandbox.now() >= customer.created + 3600
    async with serve(restarted, bound_socket()) as base, stripe_client(base) as client:
        again = await client.v1.customers.retrieve_async(customer.id)
        assert again.email == "kept@example.com"
