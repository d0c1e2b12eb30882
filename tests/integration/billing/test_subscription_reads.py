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


async def test_with_the_customer_hint_one_round_trip_sees_the_same_reversal(service: RunningService) -> None:
    subscriber = await subscribe(service, "onetrip")
    invoice = await first_invoice(service, subscriber.subscription_id)
    gateway = service.runtime.stripe
    read = gateway.subscription_with_reversal
    assert (await read(subscriber.subscription_id, invoice, subscriber.customer_id))[1] is None
    charges = await service.stripe.v1.charges.list_async(params={"customer": subscriber.customer_id})
    await service.stripe.v1.refunds.create_async(params={"charge": charges.data[0].id})
    await service.sandbox.deliver_pending(within=15)  # the service's own reads of the refund are done
    service.sandbox.request_log.clear()
    subscription, reversal = await read(subscriber.subscription_id, invoice, subscriber.customer_id)
    assert subscription["id"] == subscriber.subscription_id
    assert reversal == "refunded"
    assert sorted(service.sandbox.request_log) == [
        ("GET", "/v1/charges"),
        ("GET", "/v1/invoice_payments"),
        ("GET", f"/v1/subscriptions/{subscriber.subscription_id}"),
    ]


async def test_a_wrong_customer_hint_falls_back_to_reading_the_payments_charges(
    service: RunningService,
) -> None:
    subscriber = await subscribe(service, "payer")
    other = await subscribe(service, "other")
    invoice = await first_invoice(service, subscriber.subscription_id)
    charges = await service.stripe.v1.charges.list_async(params={"customer": subscriber.customer_id})
    await service.stripe.v1.refunds.create_async(params={"charge": charges.data[0].id})
    gateway = service.runtime.stripe
    await service.sandbox.deliver_pending(within=15)
    service.sandbox.request_log.clear()
    _, reversal = await gateway.subscription_with_reversal(
        subscriber.subscription_id, invoice, other.customer_id
    )
    assert reversal == "refunded"
    assert service.sandbox.request_log.count(("GET", "/v1/charges")) == 2  # the customer's, the payment's
