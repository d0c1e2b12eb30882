"""Which calls are one call: what a credit-funded call is charged across connections and retries."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import select

from service.billing.usage_models import CreditEntry, UsageRecord
from service.db.metadata import utcnow
from service.identity.models import User
from service.paywall.admission import IDEMPOTENCY_KEY_META, RETRY_WINDOW_SECONDS
from tests.support import factories
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.service import RunningService

CHART = "ascii_chart"
CHART_ARGS = {"values": [3, 1, 2]}


async def credits_spent(service: RunningService, user: User) -> int:
    entries = await service.rows(CreditEntry, user_id=user.id)
    return -sum(int(entry.delta) for entry in entries if entry.delta < 0)


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


async def test_a_call_named_by_its_idempotency_key_is_charged_once(service: RunningService) -> None:
    gus = await service.add_user("gus")
    await factories.credits(service, gus)
    retried = await call_on_new_connections(service, gus, 3, meta={IDEMPOTENCY_KEY_META: "order-17"})
    assert retried == [True, True, True]
    assert await credits_spent(service, gus) == 1
    assert await call_on_new_connections(service, gus, 1, meta={IDEMPOTENCY_KEY_META: "order-18"}) == [True]
    assert await credits_spent(service, gus) == 2


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


async def test_a_call_retried_after_the_retry_window_is_refused_unpaid(service: RunningService) -> None:
    """One payment does not buy endless repeats: a key recorded over ten minutes ago is refused."""
    joy = await service.add_user("joy")
    await factories.credits(service, joy)
    assert await call_on_new_connections(service, joy, 1, meta={IDEMPOTENCY_KEY_META: "old"}) == [True]
    async with service.runtime.sessions() as session, session.begin():
        [row] = (await session.exec(select(UsageRecord).where(UsageRecord.user_id == joy.id))).all()
        row.created_at = utcnow() - timedelta(seconds=RETRY_WINDOW_SECONDS + 60)
        session.add(row)
    token = (await service.personal_token("joy")).secret
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="2026-07-28") as client:
        stale = await client.call_tool(CHART, CHART_ARGS, meta={IDEMPOTENCY_KEY_META: "old"})  # type: ignore[arg-type]
        fresh = await client.call_tool(CHART, CHART_ARGS, meta={IDEMPOTENCY_KEY_META: "new"})  # type: ignore[arg-type]
    assert stale.is_error and "more than 10 minutes ago" in str(stale.content)
    assert not fresh.is_error
    assert await credits_spent(service, joy) == 2, "the first call and the new one paid, not the stale retry"
