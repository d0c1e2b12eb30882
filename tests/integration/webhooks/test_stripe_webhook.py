"""POST /webhooks/stripe: forged, stale, replayed, duplicated, inconsistent and reordered events."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from service.audit.models import AuditEvent
from service.billing.events import EntitlementChanged
from service.billing.models import StripeCustomer, StripeEvent, Subscription
from service.paywall.models import Elicitation
from stripe_sandbox import sign_webhook_payload
from tests.support import factories
from tests.support.payment import open_checkout, pay, pay_checkout_session
from tests.support.service import RunningService, run_service
from tests.support.subscriptions import can_use_paid_tool

CHART_ARGS = {"values": [1, 2]}


def event_body(event_id: str, event_type: str, obj: dict[str, Any], created: int | None = None) -> bytes:
    return json.dumps(
        {
            "id": event_id,
            "object": "event",
            "api_version": "2026-10-28.endive",
            "created": created or int(time.time()),
            "data": {"object": obj},
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "type": event_type,
        }
    ).encode()


async def post_webhook(
    service: RunningService, body: bytes, signature: str | None
) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if signature is not None:
        headers["Stripe-Signature"] = signature
    async with service.http() as http:
        response = await http.post("/webhooks/stripe", content=body, headers=headers)
    return response.status_code, response.json()


def signed(service: RunningService, body: bytes, *, secret: str | None = None, at: int | None = None) -> str:
    return sign_webhook_payload(
        body, secret or service.settings.stripe.webhook_secrets[0], at or int(time.time())
    )


REFUSED = {"error": "invalid_request"}  # whichever check failed


async def rejection_detail(service: RunningService) -> str:
    """The one audit row a service's first rejected delivery leaves: why it was refused."""
    [rejected] = await service.rows(AuditEvent, kind="webhook_rejected")
    return str(rejected.detail)


@pytest.mark.parametrize(
    ("signature_of", "reason"),
    [
        (lambda service, body: None, "missing Stripe-Signature"),
        (lambda service, body: signed(service, body, secret="whsec_forged"), "signature verification failed"),
        (
            lambda service, body: signed(service, body, at=int(time.time()) - 3600),
            "signature verification failed",
        ),
        (lambda service, body: "t=1,v1=deadbeef", "signature verification failed"),
    ],
    ids=["missing", "forged", "stale", "garbage"],
)
async def test_unverifiable_events_are_refused_and_not_stored(
    service: RunningService, signature_of: Any, reason: str
) -> None:
    body = event_body(
        "evt_forged_1", "customer.subscription.updated", {"id": "sub_x", "object": "subscription"}
    )
    status, answer = await post_webhook(service, body, signature_of(service, body))
    assert (status, answer) == (400, REFUSED)
    assert await service.rows(StripeEvent, id="evt_forged_1") == []
    assert reason in await rejection_detail(service)


async def test_malformed_json_with_a_valid_signature_is_refused(service: RunningService) -> None:
    body = b'{"id": "evt_1", "type": '
    status, answer = await post_webhook(service, body, signed(service, body))
    assert (status, answer) == (400, REFUSED)
    assert "not valid JSON" in await rejection_detail(service)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[1, 2]", "not a JSON object"),
        (b'{"type": "invoice.paid", "created": 1, "data": {"object": {}}}', "no id"),
        (b'{"id": "evt_n", "created": 1, "data": {"object": {}}}', "no type"),
        (b'{"id": "evt_n", "type": "invoice.paid", "created": "soon", "data": {"object": {}}}', "no created"),
        (b'{"id": "evt_n", "type": "invoice.paid", "created": 1, "data": {}}', "no data.object"),
        (b"\xff\xfe", "not UTF-8"),
    ],
    ids=["array", "no-id", "no-type", "bad-created", "no-object", "not-utf8"],
)
async def test_signed_json_that_is_not_an_event_is_refused_and_not_stored(
    service: RunningService, body: bytes, why: str
) -> None:
    status, answer = await post_webhook(service, body, signed(service, body))
    assert (status, answer) == (400, REFUSED)
    assert why in await rejection_detail(service)
    assert await service.rows(StripeEvent, id="evt_n") == []


async def test_replayed_event_is_applied_once(service: RunningService) -> None:
    body = event_body("evt_replayed", "invoice.created", {"id": "in_1", "object": "invoice"})
    signature = signed(service, body)
    first = await post_webhook(service, body, signature)
    second = await post_webhook(service, body, signature)
    assert first == (200, {"received": True, "outcome": "ignored"})
    assert second == (200, {"received": True, "outcome": "duplicate"})
    assert len(await service.rows(StripeEvent, id="evt_replayed")) == 1


async def test_rotated_secrets_all_verify(database_url: str) -> None:
    async with run_service(database_url, stripe_webhook_secret="whsec_new,whsec_old") as service:
        body = event_body("evt_rotated", "invoice.created", {"id": "in_2", "object": "invoice"})
        status, _ = await post_webhook(service, body, signed(service, body, secret="whsec_old"))
    assert status == 200


async def start_elicitation(service: RunningService, username: str) -> str:
    """A new user's payment link, as their first unpaid call of the paid tool opens it."""
    return await factories.payment_link(service, await service.add_user(username))


async def test_signed_but_inconsistent_checkout_grants_nothing(service: RunningService) -> None:
    url = await start_elicitation(service, "olga")
    elicitation_id = url.rsplit("/", 1)[1]
    [owner] = await service.rows(Elicitation, id=elicitation_id)
    checkout = {
        "id": "cs_test_tampered",
        "object": "checkout.session",
        "mode": "subscription",
        "payment_status": "paid",
        "client_reference_id": "usr_attacker",
        "customer": "cus_attacker",
        "subscription": "sub_attacker",
        "metadata": {"user_id": owner.user_id, "elicitation_id": elicitation_id, "plan_id": "pro"},
    }
    body = event_body("evt_tampered", "checkout.session.completed", checkout)
    # The prefetch of an unknown subscription fails first: non-2xx, so Stripe would retry; nothing stored.
    status, _ = await post_webhook(service, body, signed(service, body))
    assert status == 502
    assert await service.rows(StripeEvent, id="evt_tampered") == []
    assert await service.rows(Subscription) == []
    [still_open] = await service.rows(Elicitation, id=elicitation_id)
    assert still_open.status == "open"


async def test_a_real_payment_then_a_replay_of_its_events(service: RunningService) -> None:
    url = await start_elicitation(service, "pia")
    await pay(service, url, "pia")
    await service.sandbox.deliver_pending(within=10)
    [subscription] = await service.rows(Subscription)
    assert subscription.status == "active"
    events = await service.stripe.v1.events.list_async(params={"type": "checkout.session.completed"})
    assert len(events.data) == 1
    body = json.dumps(events.data[0].to_dict()).encode()
    status, answer = await post_webhook(service, body, signed(service, body))
    assert (status, answer["outcome"]) == (200, "duplicate")
    assert len(await service.rows(StripeEvent, type="checkout.session.completed")) == 1
    # The grant (recorded while applying) and the acceptance go in the transaction's one audit INSERT.
    [granted] = await service.rows(AuditEvent, kind="entitlement_granted")
    assert granted.user_id == subscription.user_id
    assert json.loads(granted.detail)["subscription"] == subscription.id
    accepted = await service.rows(AuditEvent, kind="webhook_accepted")
    assert events.data[0].id in {json.loads(row.detail)["event_id"] for row in accepted}


@pytest.fixture
async def adversarial_service(database_url: str) -> AsyncIterator[RunningService]:
    async with run_service(database_url, stripe_sandbox_adversarial=True) as running:
        yield running


async def test_adversarial_delivery_ends_in_the_right_state(adversarial_service: RunningService) -> None:
    service = adversarial_service
    url = await start_elicitation(service, "quin")
    await pay(service, url, "quin")
    await service.sandbox.deliver_pending(within=15)
    [subscription] = await service.rows(Subscription)
    assert subscription.status == "active"
    [elicitation] = await service.rows(Elicitation)
    assert elicitation.status == "completed"
    stored = await service.rows(StripeEvent)
    assert len({row.id for row in stored}) == len(stored)
    granted = await service.rows(AuditEvent, kind="entitlement_granted")
    assert len(granted) == 1


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        ({"client_reference_id": "usr_attacker"}, "disagree about the user"),
        ({"client_reference_id": "usr_attacker", "metadata_user": "usr_attacker"}, "not this user's"),
        ({"mode": "payment"}, "names no credit pack"),
        ({"payment_status": "unpaid"}, "payment not completed"),
    ],
    ids=["reference-vs-metadata", "someone-elses-elicitation", "payment-mode", "unpaid"],
)
async def test_signed_events_that_do_not_add_up_are_ignored(
    service: RunningService, tamper: dict[str, str], why: str
) -> None:
    url = await start_elicitation(service, "rex")
    elicitation_id = url.rsplit("/", 1)[1]
    [owner] = await service.rows(Elicitation, id=elicitation_id)
    checkout = {
        "id": "cs_test_odd",
        "object": "checkout.session",
        "mode": tamper.get("mode", "subscription"),
        "payment_status": tamper.get("payment_status", "paid"),
        "client_reference_id": tamper.get("client_reference_id", owner.user_id),
        "customer": "cus_whoever",
        "subscription": None,
        "metadata": {
            "user_id": tamper.get("metadata_user", owner.user_id),
            "elicitation_id": elicitation_id,
            "plan_id": "pro",
        },
    }
    body = event_body("evt_odd", "checkout.session.completed", checkout)
    status, answer = await post_webhook(service, body, signed(service, body))
    assert (status, answer["outcome"]) == (200, "ignored")
    [stored] = await service.rows(StripeEvent, id="evt_odd")
    assert stored.detail is not None and why in stored.detail
    [still_open] = await service.rows(Elicitation, id=elicitation_id)
    assert still_open.status == "open"
    assert await service.rows(AuditEvent, kind="entitlement_granted") == []


async def test_a_payment_completes_the_open_elicitations_it_satisfies_and_no_others(
    service: RunningService,
) -> None:
    """The checkout's own plan, or failing that all of the buyer's plans, decide what completes."""
    url = await start_elicitation(service, "sam")
    named_id = url.rsplit("/", 1)[1]
    other_user_url = await start_elicitation(service, "tom")
    [named] = await service.rows(Elicitation, id=named_id)
    assert named.plan_id == "pro"

    def open_elicitation(elicitation_id: str, plan_id: str, tool_name: str) -> Elicitation:
        return Elicitation(
            id=elicitation_id,
            user_id=named.user_id,
            plan_id=plan_id,
            tool_name=tool_name,
            protocol_era="2025-11-25",
            expires_at=named.expires_at,
        )

    async with service.runtime.sessions() as session, session.begin():
        # Pro unlocks sql_explain, whatever plan this elicitation was opened for.
        session.add(open_elicitation("el_pro_unlocks_its_tool", "team", "sql_explain"))
        # Only Team unlocks password_audit.
        session.add(open_elicitation("el_not_unlocked", "enterprise", "password_audit"))
        # A plan Sam already has (made active by an event that completes nothing), not Pro.
        session.add(open_elicitation("el_sams_other_plan", "legacy", "password_audit"))
        session.add(
            Subscription(
                id="sub_legacy",
                user_id=named.user_id,
                customer_id="cus_legacy",
                plan_id="legacy",
                status="active",
            )
        )
    # Only the checkout's own event, so nothing else (invoice.paid) completes what it missed.
    for endpoint in (await service.stripe.v1.webhook_endpoints.list_async()).data:
        await service.stripe.v1.webhook_endpoints.delete_async(endpoint.id)
    await pay(service, url, "sam")
    [completed] = (
        await service.stripe.v1.events.list_async(params={"type": "checkout.session.completed"})
    ).data
    body = json.dumps(completed.to_dict()).encode()
    status, answer = await post_webhook(service, body, signed(service, body))
    assert (status, answer["outcome"]) == (200, "applied")
    statuses = {row.id: row.status for row in await service.rows(Elicitation)}
    assert statuses == {
        named_id: "completed",
        "el_pro_unlocks_its_tool": "completed",
        "el_sams_other_plan": "completed",
        "el_not_unlocked": "open",
        other_user_url.rsplit("/", 1)[1]: "open",
    }


async def test_a_price_outside_the_catalog_grants_nothing_whatever_its_metadata_says(
    service: RunningService,
) -> None:
    """Anyone holding the Stripe key can sell a look-alike price and write `plan_id: pro` on it."""
    url = await start_elicitation(service, "uma")
    elicitation_id = url.rsplit("/", 1)[1]
    [elicitation] = await service.rows(Elicitation, id=elicitation_id)
    started = await open_checkout(service, url, "uma")  # binds uma's Stripe customer
    assert started.status_code == 303, started.text
    [customer] = await service.rows(StripeCustomer, user_id=elicitation.user_id)

    stripe = service.stripe.v1
    product = await stripe.products.create_async(params={"name": "Pro (cheap)"})
    cheap = await stripe.prices.create_async(
        params={
            "product": product.id,
            "unit_amount": 1,
            "currency": "usd",
            "recurring": {"interval": "month"},
            "lookup_key": "not_in_the_catalog",
            "metadata": {"plan_id": "pro"},
        }
    )
    metadata = {"user_id": elicitation.user_id, "elicitation_id": elicitation_id, "plan_id": "pro"}
    checkout = await stripe.checkout.sessions.create_async(
        params={
            "mode": "subscription",
            "customer": customer.customer_id,
            "client_reference_id": elicitation.user_id,
            "line_items": [{"price": cheap.id, "quantity": 1}],
            "metadata": metadata,
            "subscription_data": {"metadata": metadata},
            "success_url": f"{service.base_url}/pay/{elicitation_id}/success",
        }
    )
    assert checkout.id is not None
    await pay_checkout_session(service.stripe, checkout.id)
    await service.sandbox.deliver_pending(within=15)

    subscriptions = await stripe.subscriptions.list_async(params={"customer": customer.customer_id})
    assert [item.price.id for item in subscriptions.data[0]["items"].data] == [cheap.id], "it was paid"
    assert await service.rows(Subscription) == []
    assert await service.rows(AuditEvent, kind="entitlement_granted") == []
    [still_open] = await service.rows(Elicitation, id=elicitation_id)
    assert still_open.status == "open"
    token = (await service.personal_token("uma")).secret
    assert not await can_use_paid_tool(service, token)


async def test_listeners_hear_a_payment_after_it_commits_and_a_failing_one_fails_nothing(
    service: RunningService,
) -> None:
    """Billing's events reach the paywall's listeners only once the payment's transaction committed:
    a listener reading with a session of its own already sees the elicitation completed."""
    url = await start_elicitation(service, "rex")
    elicitation_id = url.rsplit("/", 1)[1]
    seen: list[tuple[tuple[str, ...], str]] = []

    async def reads_back(change: EntitlementChanged) -> None:
        async with service.runtime.sessions() as session:
            row = await session.get(Elicitation, elicitation_id)
            seen.append((change.completed_elicitation_ids, row.status if row else "missing"))

    async def fails(change: EntitlementChanged) -> None:
        raise RuntimeError("a listener broke")

    service.runtime.bus.subscribe(fails)
    service.runtime.bus.subscribe(reads_back)
    await pay(service, url, "rex")
    await service.sandbox.deliver_pending(within=10)
    assert ((elicitation_id,), "completed") in seen
    assert {row.outcome for row in await service.rows(StripeEvent)} <= {"applied", "ignored"}
    [completed] = await service.rows(StripeEvent, type="checkout.session.completed")
    assert completed.outcome == "applied"
