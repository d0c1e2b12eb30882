"""A subscribed user, made the way a real one is: a paid tool call, the payment page, Checkout, webhooks."""

from __future__ import annotations

from dataclasses import dataclass

from mcp import MCPError, UrlElicitationRequiredError

from service.billing.models import StripeCustomer, Subscription
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.payment import pay
from tests.support.service import RunningService

PAID_TOOL = "ascii_chart"
PAID_ARGS = {"values": [2, 1]}
DAY = 86400


@dataclass(frozen=True)
class Subscriber:
    username: str
    user_id: str
    token: str
    customer_id: str
    subscription_id: str


async def paid_tool_url(service: RunningService, token: str) -> str | None:
    """None when the paid tool runs for this token, else the payment URL it answers with."""
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
        try:
            result = await client.call_tool(PAID_TOOL, PAID_ARGS)
        except MCPError as exc:
            if exc.code != -32042:
                raise
            return UrlElicitationRequiredError.from_error(exc.error).elicitations[0].url
    assert not result.is_error, result
    return None


async def can_use_paid_tool(service: RunningService, token: str) -> bool:
    return await paid_tool_url(service, token) is None


async def subscribe(service: RunningService, username: str) -> Subscriber:
    user = await service.add_user(username)
    token = (await service.personal_token(username)).secret
    url = await paid_tool_url(service, token)
    assert url is not None
    await pay(service, url, username)
    await service.sandbox.deliver_pending(within=15)
    [customer] = await service.rows(StripeCustomer, user_id=user.id)
    [subscription] = await service.rows(Subscription, user_id=user.id)
    assert subscription.status == "active"
    return Subscriber(username, user.id, token, customer.customer_id, subscription.id)


async def subscription_row(service: RunningService, subscription_id: str) -> Subscription:
    [row] = await service.rows(Subscription, id=subscription_id)
    return row


async def advance(service: RunningService, seconds: int) -> None:
    await service.stripe.raw_request_async("post", "/v1/test_helpers/sandbox/advance", seconds=seconds)
    await service.sandbox.deliver_pending(within=15)
