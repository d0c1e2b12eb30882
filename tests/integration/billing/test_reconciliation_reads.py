"""What reconciliation reads from Stripe: list pages as JSON, and nothing more for what is current."""

from __future__ import annotations

from service.billing.models import Subscription
from tests.support.service import RunningService
from tests.support.subscriptions import subscribe


async def test_checkout_pages_follow_stripes_cursor(service: RunningService) -> None:
    gateway = service.runtime.stripe
    price_id = await gateway.price_id(service.runtime.catalog.all()[0])
    created = []
    for index in range(101):
        checkout = await service.stripe.v1.checkout.sessions.create_async(
            params={
                "mode": "subscription",
                "line_items": [{"price": price_id, "quantity": 1}],
                "metadata": {"n": str(index)},
                "success_url": "http://127.0.0.1:9/done",
            }
        )
        created.append(checkout.id)
    pages = [page async for page in gateway.recent_checkout_pages(0)]
    assert [len(page) for page in pages] == [100, 1]
    listed = [checkout["id"] for page in pages for checkout in page]
    assert listed == created[::-1], "every checkout once, newest first, across the page boundary"
    assert all(isinstance(checkout, dict) for page in pages for checkout in page), "plain JSON"


async def test_a_reconciliation_after_delivered_webhooks_only_lists(service: RunningService) -> None:
    subscriber = await subscribe(service, "current")
    [charge] = (await service.stripe.v1.charges.list_async(params={"customer": subscriber.customer_id})).data
    await service.stripe.v1.refunds.create_async(params={"charge": charge.id, "amount": 100})
    await service.sandbox.deliver_pending(within=15)
    service.sandbox.request_log.clear()
    report = await service.runtime.reconciler.run()
    assert (report.checkouts, report.checkouts_current, report.repaired) == (1, 1, 0)
    assert report.events_replayed == 0, "the refund's event was delivered and stored"
    reads = sorted(set(service.sandbox.request_log))
    assert ("GET", "/v1/checkout/sessions") in reads
    assert ("GET", "/v1/events") in reads
    assert ("GET", "/v1/subscriptions") in reads, "the customer's subscriptions are still re-read"
    assert ("GET", f"/v1/subscriptions/{subscriber.subscription_id}") not in reads, (
        "the webhook already applied the checkout: its subscription is not read for it"
    )
    [row] = await service.rows(Subscription)
    assert row.status == "active"
