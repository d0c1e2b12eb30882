"""Entitlement follows the money for a subscription's whole life, driven by the sandbox and real webhooks."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import pytest

from service.audit.models import AuditEvent
from service.billing.models import StripeEvent
from service.paywall.models import Elicitation
from stripe_sandbox import sign_webhook_payload
from tests.support.payment import answer_dispute, checkout_session_id, open_checkout
from tests.support.service import RunningService, run_service
from tests.support.subscriptions import (
    DAY,
    advance,
    can_use_paid_tool,
    paid_tool_url,
    subscribe,
    subscription_row,
)


async def test_renewal_keeps_access_and_moves_the_period(service: RunningService) -> None:
    subscriber = await subscribe(service, "ren")
    before = await subscription_row(service, subscriber.subscription_id)
    await advance(service, 31 * DAY)
    after = await subscription_row(service, subscriber.subscription_id)
    assert after.status == "active"
    assert before.current_period_end is not None and after.current_period_end is not None
    assert after.current_period_end > before.current_period_end
    assert await can_use_paid_tool(service, subscriber.token)
    assert await service.rows(StripeEvent, type="invoice.paid")


@pytest.fixture
async def no_grace_service(database_url: str) -> AsyncIterator[RunningService]:
    async with run_service(database_url, past_due_grace_seconds=0) as running:
        yield running


async def fail_next_renewal(service: RunningService, customer_id: str) -> None:
    await service.stripe.raw_request_async(
        "post", f"/v1/test_helpers/customers/{customer_id}/fail_renewals", fail="true"
    )


async def test_past_due_keeps_access_within_the_grace_period(service: RunningService) -> None:
    subscriber = await subscribe(service, "pat")
    await fail_next_renewal(service, subscriber.customer_id)
    await advance(service, 31 * DAY)
    assert (await subscription_row(service, subscriber.subscription_id)).status == "past_due"
    assert await can_use_paid_tool(service, subscriber.token), "three days of grace by default"


async def test_past_due_beyond_the_grace_period_revokes(no_grace_service: RunningService) -> None:
    service = no_grace_service
    subscriber = await subscribe(service, "pam")
    await fail_next_renewal(service, subscriber.customer_id)
    await advance(service, 31 * DAY)
    assert (await subscription_row(service, subscriber.subscription_id)).status == "past_due"
    assert not await can_use_paid_tool(service, subscriber.token)


async def test_recovered_payment_restores_access(no_grace_service: RunningService) -> None:
    service = no_grace_service
    subscriber = await subscribe(service, "rex")
    await fail_next_renewal(service, subscriber.customer_id)
    await advance(service, 31 * DAY)
    assert not await can_use_paid_tool(service, subscriber.token)
    await service.stripe.raw_request_async(
        "post", f"/v1/test_helpers/customers/{subscriber.customer_id}/fail_renewals", fail="false"
    )
    await advance(service, 3 * DAY + 60)  # the first payment retry falls due and succeeds
    assert (await subscription_row(service, subscriber.subscription_id)).status == "active"
    assert await can_use_paid_tool(service, subscriber.token)


async def test_all_retries_failing_cancels_and_revokes(service: RunningService) -> None:
    subscriber = await subscribe(service, "fay")
    await fail_next_renewal(service, subscriber.customer_id)
    await advance(service, 31 * DAY)  # the renewal fails: past_due
    for _ in range(3):  # the retries, 3, 5 and 7 days apart, fail too
        await advance(service, 8 * DAY)
    row = await subscription_row(service, subscriber.subscription_id)
    assert row.status == "canceled"
    assert not await can_use_paid_tool(service, subscriber.token)


async def test_cancel_at_period_end_keeps_access_until_the_end(service: RunningService) -> None:
    subscriber = await subscribe(service, "cal")
    await service.stripe.v1.subscriptions.update_async(
        subscriber.subscription_id, params={"cancel_at_period_end": True}
    )
    await service.sandbox.deliver_pending(within=15)
    row = await subscription_row(service, subscriber.subscription_id)
    assert row.cancel_at_period_end and row.status == "active"
    assert await can_use_paid_tool(service, subscriber.token)
    await advance(service, 32 * DAY)
    assert (await subscription_row(service, subscriber.subscription_id)).status == "canceled"
    assert not await can_use_paid_tool(service, subscriber.token)


async def latest_charge(service: RunningService, customer_id: str) -> str:
    charges = await service.stripe.v1.charges.list_async(params={"customer": customer_id, "limit": 1})
    return charges.data[0].id


async def test_full_refund_revokes_until_the_next_payment(service: RunningService) -> None:
    subscriber = await subscribe(service, "ref")
    await service.stripe.v1.refunds.create_async(
        params={"charge": await latest_charge(service, subscriber.customer_id)}
    )
    await service.sandbox.deliver_pending(within=15)
    row = await subscription_row(service, subscriber.subscription_id)
    assert row.access_revoked_reason == "refunded"
    assert not await can_use_paid_tool(service, subscriber.token)
    await advance(service, 31 * DAY)  # the next period is paid again
    assert (await subscription_row(service, subscriber.subscription_id)).access_revoked_reason is None
    assert await can_use_paid_tool(service, subscriber.token)


async def test_partial_refund_keeps_access(service: RunningService) -> None:
    subscriber = await subscribe(service, "par")
    charge = await latest_charge(service, subscriber.customer_id)
    await service.stripe.v1.refunds.create_async(params={"charge": charge, "amount": 100})
    await service.sandbox.deliver_pending(within=15)
    assert (await subscription_row(service, subscriber.subscription_id)).access_revoked_reason is None
    assert await can_use_paid_tool(service, subscriber.token)


async def test_dispute_revokes(service: RunningService) -> None:
    subscriber = await subscribe(service, "dis")
    charge = await latest_charge(service, subscriber.customer_id)
    await service.stripe.raw_request_async(
        "post", f"/v1/test_helpers/charges/{charge}/dispute", reason="fraudulent"
    )
    await service.sandbox.deliver_pending(within=15)
    assert (await subscription_row(service, subscriber.subscription_id)).access_revoked_reason == "disputed"
    assert not await can_use_paid_tool(service, subscriber.token)


async def decide_dispute(service: RunningService, charge: str, evidence: str) -> None:
    """Answer the charge's dispute with test-mode evidence, and deliver what that emits."""
    await answer_dispute(service.stripe, charge, evidence)
    await service.sandbox.deliver_pending(within=15)


async def test_a_won_dispute_gives_access_back_for_good(service: RunningService) -> None:
    subscriber = await subscribe(service, "won")
    charge = await latest_charge(service, subscriber.customer_id)
    await service.stripe.raw_request_async(
        "post", f"/v1/test_helpers/charges/{charge}/dispute", reason="fraudulent"
    )
    await service.sandbox.deliver_pending(within=15)
    assert not await can_use_paid_tool(service, subscriber.token)

    await decide_dispute(service, charge, "winning_evidence")
    assert (await service.stripe.v1.charges.retrieve_async(charge)).disputed, "as on Stripe"
    assert (await subscription_row(service, subscriber.subscription_id)).access_revoked_reason is None
    assert await can_use_paid_tool(service, subscriber.token)
    # A later event about the subscription reads its payment again: a won dispute stays won.
    await service.stripe.v1.subscriptions.update_async(
        subscriber.subscription_id, params={"metadata": {"note": "after the dispute"}}
    )
    await service.sandbox.deliver_pending(within=15)
    assert (await subscription_row(service, subscriber.subscription_id)).access_revoked_reason is None
    assert await can_use_paid_tool(service, subscriber.token)


async def test_an_inquiry_keeps_access_until_it_escalates(service: RunningService) -> None:
    subscriber = await subscribe(service, "inq")
    charge = await latest_charge(service, subscriber.customer_id)
    await service.stripe.raw_request_async(
        "post", f"/v1/test_helpers/charges/{charge}/dispute", case_type="inquiry"
    )
    await service.sandbox.deliver_pending(within=15)
    assert (await service.stripe.v1.charges.retrieve_async(charge)).disputed, "as on Stripe"
    assert (await subscription_row(service, subscriber.subscription_id)).access_revoked_reason is None
    assert await can_use_paid_tool(service, subscriber.token), "an inquiry withdraws no funds"

    await decide_dispute(service, charge, "escalate_inquiry_evidence")
    assert (await subscription_row(service, subscriber.subscription_id)).access_revoked_reason == "disputed"
    assert not await can_use_paid_tool(service, subscriber.token)


async def test_a_lost_dispute_keeps_access_revoked(service: RunningService) -> None:
    subscriber = await subscribe(service, "los")
    charge = await latest_charge(service, subscriber.customer_id)
    await service.stripe.raw_request_async("post", f"/v1/test_helpers/charges/{charge}/dispute")
    await service.sandbox.deliver_pending(within=15)
    await decide_dispute(service, charge, "losing_evidence")
    assert (await subscription_row(service, subscriber.subscription_id)).access_revoked_reason == "disputed"
    assert not await can_use_paid_tool(service, subscriber.token)


async def post_signed(service: RunningService, event: dict[str, object]) -> int:
    body = json.dumps(event, default=str).encode()
    signature = sign_webhook_payload(body, service.settings.stripe.webhook_secrets[0], int(time.time()))
    async with service.http() as http:
        response = await http.post("/webhooks/stripe", content=body, headers={"Stripe-Signature": signature})
    return response.status_code


async def test_a_late_active_never_revives_a_canceled_subscription(service: RunningService) -> None:
    subscriber = await subscribe(service, "lat")
    stale = (await service.stripe.v1.subscriptions.retrieve_async(subscriber.subscription_id)).to_dict()
    await service.stripe.v1.subscriptions.cancel_async(subscriber.subscription_id)
    await service.sandbox.deliver_pending(within=15)
    assert (await subscription_row(service, subscriber.subscription_id)).status == "canceled"
    for event_id, created in (("evt_late_old", 1), ("evt_late_new", int(time.time()) + 10 * 365 * DAY)):
        event = {
            "id": event_id,
            "object": "event",
            "type": "customer.subscription.updated",
            "created": created,
            "livemode": False,
            "api_version": "2026-10-28.endive",
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "data": {"object": stale},
        }
        assert await post_signed(service, event) == 200
    assert (await subscription_row(service, subscriber.subscription_id)).status == "canceled"
    assert not await can_use_paid_tool(service, subscriber.token)


async def test_expired_checkout_closes_its_elicitation(service: RunningService) -> None:
    await service.add_user("exp")
    token = (await service.personal_token("exp")).secret
    url = await paid_tool_url(service, token)
    assert url is not None
    started = await open_checkout(service, url, "exp")
    await service.stripe.v1.checkout.sessions.expire_async(checkout_session_id(started.headers["location"]))
    await service.sandbox.deliver_pending(within=15)
    [elicitation] = await service.rows(Elicitation)
    assert elicitation.status == "expired"
    page = await open_checkout(service, url, "exp")
    assert page.status_code == 410
    assert "Start again" in page.text
    fresh = await paid_tool_url(service, token)
    assert fresh is not None and fresh != url
    assert await service.rows(AuditEvent, kind="entitlement_granted") == []
