"""Which calls are one call: what a credit-funded call is charged across connections and retries."""

from __future__ import annotations

from typing import Any

import pytest

from service.billing.usage_models import CreditEntry
from service.identity.models import User
from service.paywall.admission import IDEMPOTENCY_KEY_META
from tests.support import factories
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.service import RunningService

CHART = "ascii_chart"
CHART_ARGS = {"values": [3, 1, 2]}


async def credits_spent(service: RunningService, user: User) -> int:
    """Credits spent on calls, less those given back."""
    entries = await service.rows(CreditEntry, user_id=user.id)
    return -sum(int(entry.delta) for entry in entries if entry.reason == "spend")


async def call_on_new_connections(
    service: RunningService, user: User, times: int, meta: dict[str, Any] | None = None
) -> list[bool]:
    """The same call (each its connection's first request, so the same request id), `times` times
    over 2026-07-28 connections of their own; whether each ran."""
    token = (await service.personal_token(user.username)).secret
    ran = []
    for _ in range(times):
        async with probed_client(service.mcp_url, token, ClientProbe(), mode="2026-07-28") as client:
            result = await client.call_tool(CHART, CHART_ARGS, meta=meta)  # type: ignore[arg-type]
            ran.append(not result.is_error)
    return ran


async def test_equal_requests_on_new_connections_are_each_charged(service: RunningService) -> None:
    """2026-07-28 has no session and request ids start afresh on each connection: equal requests
    are not one call retried, or a client could repeat a paid call for free."""
    fay = await service.add_user("fay")
    await factories.credits(service, fay)
    assert await call_on_new_connections(service, fay, 3) == [True, True, True]
    assert await credits_spent(service, fay) == 3


async def test_a_call_named_by_its_idempotency_key_is_paid_and_run_once(service: RunningService) -> None:
    gus = await service.add_user("gus")
    await factories.credits(service, gus)
    retried = await call_on_new_connections(service, gus, 3, meta={IDEMPOTENCY_KEY_META: "order-17"})
    assert retried == [True, False, False], "its repeats are refused, unpaid"
    assert await credits_spent(service, gus) == 1
    assert await call_on_new_connections(service, gus, 1, meta={IDEMPOTENCY_KEY_META: "order-18"}) == [True]
    assert await credits_spent(service, gus) == 2


async def test_a_failed_call_is_given_back_and_a_completed_one_not_repeated(service: RunningService) -> None:
    hal = await service.add_user("hal")
    await factories.credits(service, hal)
    token = (await service.personal_token("hal")).secret
    meta = {IDEMPOTENCY_KEY_META: "chart-1"}
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="2026-07-28") as client:
        failed = await client.call_tool(CHART, {"values": [1, 2], "labels": ["a"]}, meta=meta)  # type: ignore[arg-type]
        retried = await client.call_tool(CHART, {"values": [1, 2], "labels": ["a", "b"]}, meta=meta)  # type: ignore[arg-type]
        repeated = await client.call_tool(CHART, {"values": [1, 2], "labels": ["a", "b"]}, meta=meta)  # type: ignore[arg-type]
    assert failed.is_error and not retried.is_error
    assert repeated.is_error and "did not run again" in str(repeated.content)
    assert await credits_spent(service, hal) == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "line\nbreak", "caf\u00e9", 17])
async def test_a_malformed_idempotency_key_is_refused_and_spends_nothing(
    service: RunningService, key: Any
) -> None:
    ida = await service.add_user("ida")
    await factories.credits(service, ida)
    token = (await service.personal_token("ida")).secret
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="2026-07-28") as client:
        result = await client.call_tool(CHART, CHART_ARGS, meta={IDEMPOTENCY_KEY_META: key})  # type: ignore[arg-type]
    assert result.is_error
    assert IDEMPOTENCY_KEY_META in str(result.content)
    assert await credits_spent(service, ida) == 0
