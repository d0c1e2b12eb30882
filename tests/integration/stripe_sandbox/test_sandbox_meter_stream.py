"""Meter event streams (API v2): sessions, batches of events, and what Stripe checks later."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import stripe

from .conftest import Env

HOUR = 3600


def _at(timestamp: int) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _token(env: Env) -> str:
    session = await env.client.v2.billing.meter_event_session.create_async()
    return str(session.authentication_token)


async def _stream(env: Env, token: str, events: list[dict[str, Any]]) -> None:
    await env.client.v2.billing.meter_event_stream.create_async(
        {"events": events},  # type: ignore[typeddict-item,unused-ignore]
        options={"api_key": token},
    )


async def _usage(env: Env, meter_id: str, customer: str, start: int) -> int:
    page = await env.client.v1.billing.meters.event_summaries.list_async(
        meter_id, params={"customer": customer, "start_time": start, "end_time": start + 2 * HOUR}
    )
    return sum(int(summary.aggregated_value) for summary in page.data)


async def test_a_session_token_carries_batches_of_events_each_counted_once(env: Env) -> None:
    meter = await env.client.v1.billing.meters.create_async(
        params={"display_name": "calls", "event_name": "calls", "default_aggregation": {"formula": "sum"}}
    )
    customer = await env.client.v1.customers.create_async()
    session = await env.client.v2.billing.meter_event_session.create_async()
    assert session.object == "v2.billing.meter_event_session" and session.livemode is False
    created = datetime.fromisoformat(session.created)
    assert (datetime.fromisoformat(session.expires_at) - created).total_seconds() == 15 * 60
    now = customer.created

    def event(index: int, value: int = 1) -> dict[str, Any]:
        return {
            "event_name": "calls",
            "identifier": f"call-{index}",
            "timestamp": _at(now),
            "payload": {"stripe_customer_id": customer.id, "value": str(value)},
        }

    await _stream(env, session.authentication_token, [event(index) for index in range(100)])
    # A resend (a crash before the sender wrote down that it sent) counts nothing again.
    await _stream(env, session.authentication_token, [event(index, 5) for index in range(90, 110)])
    start = now - now % HOUR
    assert await _usage(env, meter.id, customer.id, start) == 100 + 10 * 5
    assert list(env.sandbox.request_log).count(("POST", "/v2/billing/meter_event_stream")) == 2


async def test_what_an_event_means_is_checked_after_it_is_accepted(env: Env) -> None:
    await env.client.v1.billing.meters.create_async(
        params={"display_name": "calls", "event_name": "calls", "default_aggregation": {"formula": "count"}}
    )
    customer = await env.client.v1.customers.create_async()
    now = customer.created
    token = await _token(env)
    ours = {"stripe_customer_id": customer.id}
    sent = [
        ("calls", "old", _at(now - 36 * 86400), ours),
        ("calls", "later", _at(now + HOUR), ours),
        ("nothing", "nameless", None, ours),
        ("calls", "stranger", None, {"stripe_customer_id": "cus_none"}),
    ]
    await _stream(
        env,
        token,
        [
            {"event_name": name, "identifier": identifier, "payload": payload}
            | ({"timestamp": at} if at else {})
            for name, identifier, at, payload in sent
        ],
    )
    reports = [(error["identifier"], error["code"]) for error in env.sandbox.meter_errors]
    assert reports == [
        ("old", "timestamp_too_far_in_past"),
        ("later", "timestamp_in_future"),
        ("nameless", "no_meter"),
        ("stranger", "meter_event_customer_not_found"),
    ]


async def test_the_request_shape_is_refused_at_once(env: Env) -> None:
    token = await _token(env)
    good = {"event_name": "calls", "payload": {"stripe_customer_id": "cus_x"}}
    with pytest.raises(stripe.InvalidRequestError) as too_many:
        await _stream(env, token, [good] * 101)
    assert too_many.value.http_status == 400
    with pytest.raises(stripe.InvalidRequestError):
        await _stream(env, token, [])
    with pytest.raises(stripe.InvalidRequestError):
        await _stream(env, token, [{**good, "timestamp": "yesterday"}])
    with pytest.raises(stripe.InvalidRequestError):
        await _stream(env, token, [{**good, "payload": {"value": 1}}])
    with pytest.raises(stripe.InvalidRequestError):
        await _stream(env, token, [{**good, "identifier": "x" * 101}])
    async with httpx.AsyncClient() as http:
        huge = await http.post(
            f"{env.base_url}/v2/billing/meter_event_stream",
            headers={"Authorization": f"Bearer {token}"},
            content=b'{"events": [' + b" " * (1 << 20) + b"]}",
        )
    assert huge.status_code == 413
    assert not env.sandbox.store.meter_identifiers, "nothing of a refused request was recorded"


async def test_an_expired_or_unknown_token_is_refused(env: Env) -> None:
    token = await _token(env)
    event = {"event_name": "calls", "payload": {"stripe_customer_id": "cus_x"}}
    with pytest.raises(stripe.AuthenticationError):
        await _stream(env, "mes_tok_test_made_up", [event])
    with pytest.raises(stripe.AuthenticationError):
        await env.client.v2.billing.meter_event_session.create_async(options={"api_key": token})
    await env.advance(15 * 60)
    with pytest.raises(stripe.TemporarySessionExpiredError):
        await _stream(env, token, [event])
    await _stream(env, await _token(env), [event])
