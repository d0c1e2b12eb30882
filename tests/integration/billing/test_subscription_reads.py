"""The checkout path's combined read agrees with the plain one, whether or not its invoice hint is current."""

from __future__ import annotations

from tests.support.service import RunningService
from tests.support.subscriptions import DAY, advance, subscribe


async def first_invoice(service: RunningService, subscription_id: str) -> str:
    subscription = await service.stripe.v1.subscriptions.retrieve_async(subscription_id)
    assert isinstance(subscription.latest_invoice, str)
    return subscription.latest_invoice


async def test_a_refund_of_the_hinted_invoice_is_seen(service: RunningService) -> None:
    subscriber = await subscribe(service, "hint")
    invoice = await first_invoice(service, subscriber.subscription_id)
    gateway = service.runtime.stripe
    _, before = await gateway.subscription_with_reversal(subscriber.subscription_id, invoice)
    assert before is None
    charges = await service.stripe.v1.charges.list_async(params={"customer": subscriber.customer_id})
    await service.stripe.v1.refunds.create_async(params={"charge": charges.data[0].id})
    subscription, after = await gateway.subscription_with_reversal(subscriber.subscription_id, invoice)
    assert subscription["id"] == subscriber.subscription_id
    assert after == "refunded"


async def test_a_stale_hint_falls_back_to_the_latest_invoice(service: RunningService) -> None:
    subscriber = await subscribe(service, "stale")
    first = await first_invoice(service, subscriber.subscription_id)
    charges = await service.stripe.v1.charges.list_async(params={"customer": subscriber.customer_id})
    await service.stripe.v1.refunds.create_async(params={"charge": charges.data[0].id})
    await advance(service, 31 * DAY)  # a renewal pays a new invoice; the refunded one is history
    gateway = service.runtime.stripe
    subscription, reversal = await gateway.subscription_with_reversal(subscriber.subscription_id, first)
    assert subscription["latest_invoice"] != first
    assert reversal is None, "the current period's payment stands; the old refund must not count"
    assert reversal == await gateway.latest_payment_reversal(subscription)
