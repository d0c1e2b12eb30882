"""Events and webhook delivery: Stripe signatures, retries with backoff, endpoints API, adversarial mode."""

from __future__ import annotations

import pytest
import stripe

from tests.support.servers import bound_socket, serve
from tests.support.stripe_objects import present

from .conftest import Env, Receiver, catalog, sandbox_env, subscribed

EXPECTED_ON_CHECKOUT = {
    "customer.created",
    "invoice.created",
    "invoice.finalized",
    "invoice.paid",
    "invoice.payment_succeeded",
    "charge.succeeded",
    "payment_intent.created",
    "payment_intent.succeeded",
    "customer.subscription.created",
    "checkout.session.completed",
}


async def test_every_event_is_delivered_signed_and_listed(env: Env) -> None:
    _product, price = await catalog(env)
    session = await env.client.v1.checkout.sessions.create_async(
        params={
            "mode": "subscription",
            "line_items": [{"price": price.id, "quantity": 1}],
            "client_reference_id": "user-7",
            "subscription_data": {"metadata": {"user": "7"}},
        }
    )
    await env.raw(f"/v1/test_helpers/checkout/sessions/{session.id}/pay", card_number="4242424242424242")
    await env.sandbox.deliver_pending()
    assert env.receiver.rejected == 0
    assert EXPECTED_ON_CHECKOUT | {"product.created", "price.created"} <= set(env.receiver.types())
    listed = [
        e async for e in (await env.client.v1.events.list_async(params={"limit": 3})).auto_paging_iter()
    ]
    assert sorted(e.id for e in listed) == sorted(e.id for e in env.receiver.events)
    completed = next(e for e in env.receiver.events if e.type == "checkout.session.completed")
    assert completed.api_version == stripe.api_version and completed.livemode is False
    assert completed.data.object.client_reference_id == "user-7"
    assert completed.data.object.status == "complete"
    created = next(e for e in env.receiver.events if e.type == "customer.subscription.created")
    assert created.data.object.metadata.to_dict() == {"user": "7"}
    body = next(b for b in env.receiver.bodies if b["type"] == "checkout.session.completed")
    assert set(body) == {
        "id",
        "object",
        "api_version",
        "created",
        "data",
        "livemode",
        "pending_webhooks",
        "request",
        "type",
    }
    retrieved = await env.client.v1.events.retrieve_async(completed.id)
    request = present(retrieved.request)
    assert retrieved.pending_webhooks == 0 and request.id is not None
    assert request.idempotency_key is not None  # stripe-python sends one on every POST
    only = await env.client.v1.events.list_async(params={"type": "invoice.*", "limit": 100})
    assert {e.type for e in only.data} == {
        "invoice.created",
        "invoice.updated",
        "invoice.finalized",
        "invoice.paid",
        "invoice.payment_succeeded",
    }
    later = await env.client.v1.events.list_async(params={"created": {"gt": env.sandbox.now()}})
    assert later.data == []


async def test_failed_deliveries_are_retried_with_backoff() -> None:
    receiver = Receiver(fail_first=True)
    async with sandbox_env(receiver) as env:
        customer = await env.client.v1.customers.create_async(params={"email": "ada@example.com"})
        await env.sandbox.deliver_pending()
        [event] = env.receiver.events
        assert event.type == "customer.created" and event.data.object.id == customer.id
        assert [s for _, s in env.receiver.statuses] == [500, 200]
        attempts = [a for a in env.sandbox.webhooks.attempts if a.event_id == event.id]
        assert [(a.attempt, a.status_code) for a in attempts] == [(1, 500), (2, 200)]
        assert (await env.client.v1.events.retrieve_async(event.id)).pending_webhooks == 0


async def test_timeouts_are_retried() -> None:
    receiver = Receiver(slow_first=1.0)
    async with sandbox_env(receiver, webhook_timeout=0.3) as env:
        await env.client.v1.customers.create_async(params={"email": "ada@example.com"})
        await env.sandbox.deliver_pending()
        attempts = env.sandbox.webhooks.attempts
        assert attempts[0].status_code is None and attempts[0].error is not None
        assert attempts[-1].ok and attempts[-1].attempt >= 2


async def test_webhook_endpoints_api(env: Env) -> None:
    second = Receiver(secret="unknown-until-created")
    async with serve(second.app(), bound_socket()) as base:
        endpoint = await env.client.v1.webhook_endpoints.create_async(
            params={"url": f"{base}/webhooks/stripe", "enabled_events": ["customer.updated"]}
        )
        assert endpoint.secret is not None and endpoint.secret.startswith("whsec_")
        second.secret = endpoint.secret
        assert "secret" not in (await env.client.v1.webhook_endpoints.retrieve_async(endpoint.id)).to_dict()
        listed = await env.client.v1.webhook_endpoints.list_async()
        assert endpoint.id in {e.id for e in listed.data} and len(listed.data) == 2
        customer = await env.client.v1.customers.create_async(params={"name": "A"})
        await env.client.v1.customers.update_async(customer.id, params={"name": "B"})
        await env.sandbox.deliver_pending()
        assert second.types() == ["customer.updated"] and second.rejected == 0
        assert present(second.events[0].data.previous_attributes).name == "A"
        disabled = await env.client.v1.webhook_endpoints.update_async(endpoint.id, params={"disabled": True})
        assert disabled.status == "disabled"
        deleted = await env.client.v1.webhook_endpoints.delete_async(endpoint.id)
        assert deleted.deleted is True
        with pytest.raises(stripe.InvalidRequestError):
            await env.client.v1.webhook_endpoints.retrieve_async(endpoint.id)
        with pytest.raises(stripe.InvalidRequestError) as info:
            await env.client.v1.webhook_endpoints.create_async(
                params={"url": "not a url", "enabled_events": ["*"]}
            )
        assert info.value.param == "url"


async def test_wrong_secret_fails_verification() -> None:
    receiver = Receiver()
    async with sandbox_env(receiver) as env:
        receiver.secret = "whsec_not_the_one"
        await env.client.v1.customers.create_async(params={"name": "A"})
        await receiver.wait_for(lambda r: r.rejected >= 1)
        assert receiver.events == []


async def test_adversarial_delivery_duplicates_and_reorders() -> None:
    receiver = Receiver()
    async with sandbox_env(receiver, adversarial=True, adversarial_seed=7, adversarial_max_delay=0.2) as env:
        created = [
            (await env.client.v1.customers.create_async(params={"name": f"c{i}"})).id for i in range(12)
        ]
        await env.sandbox.deliver_pending()
        delivered = [e.data.object.id for e in receiver.events]
        assert set(delivered) == set(created)  # at least once
        assert len(delivered) > len(created)  # some more than once
        first_seen = list(dict.fromkeys(delivered))
        assert first_seen != created  # not in creation order
        events = await env.client.v1.events.list_async(params={"type": "customer.created", "limit": 100})
        assert all(e.pending_webhooks == 0 for e in events.data)


async def test_subscription_lifecycle_webhooks(env: Env) -> None:
    state = await subscribed(env)
    sub = state["subscription"]
    await env.client.v1.subscriptions.update_async(sub.id, params={"cancel_at_period_end": True})
    await env.client.v1.subscriptions.cancel_async(sub.id)
    await env.sandbox.deliver_pending()
    types = env.receiver.types()
    assert EXPECTED_ON_CHECKOUT - {"customer.created"} <= set(types)
    assert types.count("customer.subscription.updated") == 2  # incomplete -> active, then the update
    deleted = next(e for e in env.receiver.events if e.type == "customer.subscription.deleted")
    assert deleted.data.object.status == "canceled"


async def test_giving_up_is_logged() -> None:
    receiver = Receiver(fail_attempts=1000)
    async with sandbox_env(
        receiver, webhook_retry_base=0.01, webhook_retry_max_delay=0.02, webhook_retry_window=0.1
    ) as env:
        await env.client.v1.customers.create_async(params={"name": "A"})
        await env.sandbox.deliver_pending()
        attempts = list(env.sandbox.webhooks.attempts)
        assert len(attempts) >= 2 and attempts[-1].gave_up
        assert not any(a.gave_up for a in attempts[:-1])


def test_stripe_retry_schedule_lasts_three_days() -> None:
    from stripe_sandbox.config import SandboxConfig, retry_schedule

    base, largest, window = retry_schedule(SandboxConfig(webhook_retry_schedule="stripe"))
    assert (base, largest, window) == (60.0, 12 * 3600.0, 3 * 86400.0)
    compressed = retry_schedule(SandboxConfig())
    assert compressed == (0.25, 60.0, 900.0)
