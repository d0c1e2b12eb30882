"""The gateway's plain-JSON reads against the sandbox: one request when Stripe answers 200, and
stripe-python's own error otherwise."""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest
import stripe

from tests.support.service import RunningService
from tests.support.subscriptions import subscribe


async def test_a_read_is_one_request_and_the_object_stripe_python_reads(service: RunningService) -> None:
    subscriber = await subscribe(service, "lean")
    gateway = service.runtime.stripe
    service.sandbox.request_log.clear()
    subscription = await gateway.retrieve_subscription(subscriber.subscription_id)
    assert list(service.sandbox.request_log) == [("GET", f"/v1/subscriptions/{subscriber.subscription_id}")]
    through_stripe_python = await service.stripe.raw_request_async(
        "get", f"/v1/subscriptions/{subscriber.subscription_id}"
    )
    assert isinstance(subscription, Mapping), "plain JSON, no stripe-python object"
    assert dict(subscription) == through_stripe_python.data


async def test_nested_parameters_reach_stripe(service: RunningService) -> None:
    subscriber = await subscribe(service, "pages")
    gateway = service.runtime.stripe
    pages = [page async for page in gateway.recent_checkout_pages(int(time.time()) - 3600)]
    ids = [session["id"] for page in pages for session in page]
    assert any(session["subscription"] == subscriber.subscription_id for page in pages for session in page)
    assert [page async for page in gateway.recent_checkout_pages(int(time.time()) + 3600)] == []
    assert len(ids) == len(set(ids))


async def test_a_missing_object_raises_stripe_pythons_error(service: RunningService) -> None:
    gateway = service.runtime.stripe
    service.sandbox.request_log.clear()
    with pytest.raises(stripe.InvalidRequestError) as raised:
        await gateway.retrieve_subscription("sub_does_not_exist")
    assert raised.value.http_status == 404
    # Asked once plainly, then again through StripeClient, which read the error.
    assert list(service.sandbox.request_log) == [("GET", "/v1/subscriptions/sub_does_not_exist")] * 2
