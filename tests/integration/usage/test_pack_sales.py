"""A credit pack's grant pays out what its Checkout Session sold, whatever changed here since.

A payment can confirm days after checkout (SEPA Direct Debit takes up to 14 business days), by
which time retention may have deleted the elicitation and the vendor may have repriced the pack.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from service.billing.models import StripeCustomer, StripeEvent
from service.billing.usage_models import CreditBalance, CreditEntry
from service.db.metadata import utcnow
from service.paywall.models import Elicitation
from service.retention import RetentionJob
from stripe_sandbox import SandboxConfig, create_sandbox_app
from tests.integration.usage.test_credits_flow import KEY, QUERY, SMALL_PACKS, service_without_webhooks
from tests.integration.webhooks.test_stripe_webhook import event_body, post_webhook, signed
from tests.support.mcp_clients import ClientProbe, call_expecting_32042, probed_client
from tests.support.payment import buy_credits, pay_checkout_session
from tests.support.servers import bound_socket, port_of, serve
from tests.support.service import RunningService, make_settings, run_service_on

# The 3-credit pack repriced (and, to tell the two apart, resized) under a new lookup key.
REPRICED_PACKS = SMALL_PACKS.replace(
    'lookup_key = "test_credits_3"\ncredits = 3\namount = 300',
    'lookup_key = "test_credits_3_v2"\ncredits = 4\namount = 400',
)
GONE = "el_deleted_by_retention"  # an elicitation id with no row: retention deleted it


async def balances(service: RunningService) -> list[int]:
    return [row.balance for row in await service.rows(CreditBalance)]


async def checkout_of(service: RunningService, checkout_id: str) -> dict[str, Any]:
    checkout: dict[str, Any] = (
        await service.stripe.v1.checkout.sessions.retrieve_async(checkout_id)
    ).to_dict()
    return checkout


async def deliver(service: RunningService, event_id: str, event_type: str, checkout: dict[str, Any]) -> str:
    """Sign and post the event Stripe sends about `checkout`; the outcome the service answers."""
    body = event_body(event_id, event_type, checkout)
    status, answer = await post_webhook(service, body, signed(service, body))
    assert status == 200, answer
    outcome: str = answer["outcome"]
    return outcome


async def retention_deletes_the_elicitations(service: RunningService) -> None:
    """Days later: the elicitations expired long ago and the retention job deletes them."""
    async with service.runtime.sessions() as session, session.begin():
        await session.exec(update(Elicitation).values(expires_at=utcnow() - timedelta(days=8)))
    report = await RetentionJob.from_settings(service.settings.retention, service.runtime.sessions).run()
    assert report.deleted["elicitation"] >= 1
    assert await service.rows(Elicitation) == []


async def bought_through_the_page(service: RunningService, username: str) -> str:
    """A 3-credit pack bought from an elicitation's payment page, its webhook not yet delivered."""
    await service.add_user(username)
    token = (await service.personal_token(username)).secret
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "sql_explain", QUERY)
        return await buy_credits(service, elicitation.url, username, "calls_3")


async def test_a_pack_paid_after_retention_deleted_its_elicitation_is_granted_once(
    tmp_path: Path, database_url: str
) -> None:
    async with service_without_webhooks(tmp_path, database_url) as service:
        checkout_id = await bought_through_the_page(service, "sepa")
        await retention_deletes_the_elicitations(service)
        checkout = await checkout_of(service, checkout_id)

        assert await deliver(service, "evt_late", "checkout.session.async_payment_succeeded", checkout) == (
            "applied"
        )
        assert await balances(service) == [3]
        # Stripe also sends checkout.session.completed, and reconciliation reads the session too.
        assert await deliver(service, "evt_done", "checkout.session.completed", checkout) == "ignored"
        report = await service.runtime.reconciler.run()
        assert (report.checkouts_current, report.repaired) == (1, 0)
        assert await balances(service) == [3]
        assert [entry.delta for entry in await service.rows(CreditEntry)] == [3]


async def test_reconciliation_grants_a_pack_whose_elicitation_retention_deleted(
    tmp_path: Path, database_url: str
) -> None:
    async with service_without_webhooks(tmp_path, database_url) as service:
        await bought_through_the_page(service, "lost")
        await retention_deletes_the_elicitations(service)

        report = await service.runtime.reconciler.run()
        assert (report.repaired, report.ignored, report.unverified) == (1, 0, 0)
        assert await balances(service) == [3]


@asynccontextmanager
async def silent_sandbox() -> AsyncIterator[str]:
    """A sandbox that sends no webhooks and outlives the services started over it; its base URL."""
    stripe_socket = bound_socket()
    base = f"http://127.0.0.1:{port_of(stripe_socket)}"
    sandbox = create_sandbox_app(SandboxConfig(api_key=KEY, public_base_url=base, webhook_endpoints=()))
    async with serve(sandbox, stripe_socket):
        yield base


@asynccontextmanager
async def service_over(stripe_base: str, database_url: str, plans: Path) -> AsyncIterator[RunningService]:
    service_socket = bound_socket()
    settings = make_settings(
        database_url,
        port_of(service_socket),
        stripe_secret_key=KEY,
        stripe_api_base=stripe_base,
        plans_file=plans,
    )
    async with run_service_on(settings, service_socket) as service:
        await service.runtime.stripe.sync_plans()
        yield service


@pytest.mark.parametrize("path", ["webhook", "reconciliation"])
async def test_a_pack_repriced_while_its_payment_is_in_flight_grants_what_was_sold(
    tmp_path: Path, database_url: str, path: str
) -> None:
    old_plans, new_plans = tmp_path / "old.toml", tmp_path / "new.toml"
    old_plans.write_text(SMALL_PACKS)
    new_plans.write_text(REPRICED_PACKS)
    async with silent_sandbox() as stripe_base:
        async with service_over(stripe_base, database_url, old_plans) as before:
            checkout_id = await bought_through_the_page(before, "rio")
        # The vendor reprices the pack and restarts before the payment's confirmation is applied.
        async with service_over(stripe_base, database_url, new_plans) as after:
            pack = after.runtime.catalog.credit_pack("calls_3")
            assert pack is not None and (pack.credits, pack.amount) == (4, 400)
            if path == "webhook":
                checkout = await checkout_of(after, checkout_id)
                assert await deliver(after, "evt_paid", "checkout.session.completed", checkout) == "applied"
            else:
                report = await after.runtime.reconciler.run()
                assert (report.repaired, report.ignored, report.unverified) == (1, 0, 0)
            assert await balances(after) == [3], "3 credits were sold for 3.00"
            [elicitation] = await after.rows(Elicitation)
            assert elicitation.status == "completed"


async def paid_session(
    service: RunningService,
    user_id: str,
    metadata: dict[str, str],
    *,
    customer_id: str | None = None,
    reference: str | None = None,
) -> dict[str, Any]:
    """A paid 3.00 Checkout Session for the 3-credit pack's price, made as `user_id`'s with
    `metadata` beside the user and an elicitation that retention has deleted."""
    pack = service.runtime.catalog.credit_pack("calls_3")
    assert pack is not None
    if customer_id is None:
        customer_id = (await service.stripe.v1.customers.create_async(params={"email": "a@example.com"})).id
    session = await service.stripe.v1.checkout.sessions.create_async(
        params={
            "mode": "payment",
            "customer": customer_id,
            "client_reference_id": reference or user_id,
            "line_items": [{"price": await service.runtime.stripe.price_id(pack), "quantity": 1}],
            "metadata": {"user_id": user_id, "elicitation_id": GONE, **metadata},
            "success_url": f"{service.base_url}/done",
            "cancel_url": f"{service.base_url}/cancel",
        }
    )
    await pay_checkout_session(service.stripe, session.id)
    return await checkout_of(service, session.id)


async def test_a_session_that_recorded_no_price_is_checked_against_the_catalog(
    tmp_path: Path, database_url: str
) -> None:
    """Sessions made before sessions recorded their pack still grant while today's price matches."""
    async with service_without_webhooks(tmp_path, database_url) as service:
        user = await service.add_user("old")
        checkout = await paid_session(service, user.id, {"credit_pack_id": "calls_3"})
        assert await deliver(service, "evt_old", "checkout.session.completed", checkout) == "applied"
        assert await balances(service) == [3]


async def test_a_session_granted_before_its_pack_was_repriced_is_not_reported_again(
    tmp_path: Path, database_url: str
) -> None:
    old_plans, new_plans = tmp_path / "old.toml", tmp_path / "new.toml"
    old_plans.write_text(SMALL_PACKS)
    new_plans.write_text(REPRICED_PACKS)
    async with silent_sandbox() as stripe_base:
        async with service_over(stripe_base, database_url, old_plans) as before:
            user = await before.add_user("twice")
            checkout = await paid_session(before, user.id, {"credit_pack_id": "calls_3"})
            assert await deliver(before, "evt_first", "checkout.session.completed", checkout) == "applied"
        async with service_over(stripe_base, database_url, new_plans) as after:
            assert await deliver(after, "evt_again", "checkout.session.completed", checkout) == "ignored"
            assert await balances(after) == [3]


SOLD = {"credit_pack_id": "calls_3", "credit_pack_credits": "3", "credit_pack_amount": "300"}


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        ({**SOLD, "credit_pack_amount": "400", "credit_pack_currency": "usd"}, "is not the price"),
        ({**SOLD, "credit_pack_currency": "eur"}, "is not the price"),
        ({**SOLD, "credit_pack_currency": "usd", "credit_pack_credits": "3e3"}, "unreadable"),
        ({**SOLD}, "unreadable"),
        ({"credit_pack_id": "calls_50"}, "is not the price"),
        ({"credit_pack_id": "calls_withdrawn"}, "not in the catalog"),
    ],
    ids=[
        "lower-amount",
        "other-currency",
        "malformed",
        "partial",
        "unrecorded-price-differs",
        "unrecorded-pack-gone",
    ],
)
async def test_a_paid_pack_that_cannot_be_verified_is_refused_loudly(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture, metadata: dict[str, str], why: str
) -> None:
    async with service_without_webhooks(tmp_path, database_url) as service:
        user = await service.add_user("ver")
        checkout = await paid_session(service, user.id, metadata)
        with caplog.at_level(logging.ERROR, logger="service.billing.stripe_sync.applier"):
            assert await deliver(service, "evt_odd", "checkout.session.completed", checkout) == "unverified"
        [stored] = await service.rows(StripeEvent, id="evt_odd")
        assert (stored.outcome, why in str(stored.detail)) == ("unverified", True)
        assert any(checkout["id"] in record.getMessage() for record in caplog.records)
        counted = service.runtime.metrics.registry.get_sample_value(
            "stripe_webhooks_total", {"type": "checkout.session.completed", "outcome": "unverified"}
        )
        assert counted == 1
        report = await service.runtime.reconciler.run()
        assert (report.unverified, report.repaired) == (1, 0)
        assert await service.rows(CreditEntry) == []


async def test_a_pack_for_someone_else_is_refused_without_its_elicitation(
    tmp_path: Path, database_url: str
) -> None:
    async with service_without_webhooks(tmp_path, database_url) as service:
        ann, eve = await service.add_user("ann"), await service.add_user("eve")
        customer = await service.stripe.v1.customers.create_async(params={"email": "ann@example.com"})
        async with service.runtime.sessions() as session, session.begin():
            session.add(StripeCustomer(user_id=ann.id, customer_id=customer.id))
        recorded = {**SOLD, "credit_pack_currency": "usd"}
        ann_customer = await paid_session(service, eve.id, recorded, customer_id=customer.id)
        disagreeing = await paid_session(service, eve.id, recorded, reference=ann.id)
        assert await deliver(service, "evt_cus", "checkout.session.completed", ann_customer) == "ignored"
        assert await deliver(service, "evt_ref", "checkout.session.completed", disagreeing) == "ignored"
        details = {row.id: str(row.detail) for row in await service.rows(StripeEvent)}
        assert "belongs to another user" in details["evt_cus"]
        assert "disagree about the user" in details["evt_ref"]
        assert (await service.runtime.reconciler.run()).repaired == 0
        assert await service.rows(CreditEntry) == []
