"""Billing Meters, meter events and meter event summaries, through stripe-python over HTTP."""

from __future__ import annotations

from typing import Any, Literal

import pytest
import stripe
from stripe.params.billing import MeterEventCreateParams, MeterEventSummaryListParams

from .conftest import Env

HOUR = 3600
DAY = 86400


async def _meter(
    env: Env, event_name: str = "sql_explain", formula: str = "sum", **extra: Any
) -> stripe.billing.Meter:
    params: dict[str, Any] = {
        "display_name": f"{event_name} calls",
        "event_name": event_name,
        "default_aggregation": {"formula": formula},
        **extra,
    }
    # Typed loosely on purpose: tests send an unknown formula and an unknown parameter through it.
    return await env.client.v1.billing.meters.create_async(params=params)  # type: ignore[arg-type]


async def _event(
    env: Env, customer: str, value: int = 1, *, identifier: str | None = None, timestamp: int | None = None
) -> stripe.billing.MeterEvent:
    params: MeterEventCreateParams = {
        "event_name": "sql_explain",
        "payload": {"stripe_customer_id": customer, "value": str(value)},
    }
    if identifier is not None:
        params["identifier"] = identifier
    if timestamp is not None:
        params["timestamp"] = timestamp
    return await env.client.v1.billing.meter_events.create_async(params=params)


def _hour_start(timestamp: int) -> int:
    return timestamp - timestamp % HOUR


async def test_meter_create_retrieve_update_list(env: Env) -> None:
    meter = await _meter(env)
    assert isinstance(meter, stripe.billing.Meter)
    assert meter.id.startswith("mtr_test_") and meter.status == "active"
    assert meter.customer_mapping.to_dict() == {"event_payload_key": "stripe_customer_id", "type": "by_id"}
    assert meter.value_settings.event_payload_key == "value"
    assert meter.default_aggregation.formula == "sum" and meter.event_time_window is None
    assert meter.status_transitions.deactivated_at is None
    custom = await _meter(
        env,
        "tokens",
        "last",
        customer_mapping={"event_payload_key": "account", "type": "by_id"},
        value_settings={"event_payload_key": "n"},
        event_time_window="hour",
    )
    assert (
        custom.customer_mapping.event_payload_key == "account"
        and custom.value_settings.event_payload_key == "n"
    )
    assert custom.event_time_window == "hour"
    fetched = await env.client.v1.billing.meters.retrieve_async(meter.id)
    assert fetched.to_dict() == meter.to_dict()
    renamed = await env.client.v1.billing.meters.update_async(
        meter.id, params={"display_name": "SQL explain"}
    )
    assert renamed.display_name == "SQL explain"
    listed = await env.client.v1.billing.meters.list_async(params={"limit": 1})
    assert [m.id for m in listed.data] == [custom.id] and listed.has_more
    rest = await env.client.v1.billing.meters.list_async(params={"starting_after": custom.id})
    assert [m.id for m in rest.data] == [meter.id] and not rest.has_more
    types = [e.type for e in (await env.client.v1.events.list_async(params={"limit": 100})).data]
    assert types.count("billing.meter.created") == 2 and types.count("billing.meter.updated") == 1
    with pytest.raises(stripe.InvalidRequestError) as missing:
        await env.client.v1.billing.meters.retrieve_async("mtr_test_nope")
    assert missing.value.http_status == 404


async def test_meter_validation_errors(env: Env) -> None:
    with pytest.raises(stripe.InvalidRequestError) as no_aggregation:
        await env.client.v1.billing.meters.create_async(
            params={"display_name": "x", "event_name": "x"}  # type: ignore[typeddict-item]
        )
    assert no_aggregation.value.param == "default_aggregation"
    with pytest.raises(stripe.InvalidRequestError) as bad_formula:
        await _meter(env, formula="max")
    assert bad_formula.value.param == "default_aggregation[formula]"
    with pytest.raises(stripe.InvalidRequestError) as unknown:
        await _meter(env, dimension_payload_keys=["region"])
    assert unknown.value.code == "parameter_unknown"


async def test_event_name_belongs_to_one_meter_even_deactivated(env: Env) -> None:
    first = await _meter(env)
    with pytest.raises(stripe.InvalidRequestError) as taken:
        await _meter(env)
    assert taken.value.param == "event_name" and "already exists" in str(taken.value.user_message)
    deactivated = await env.client.v1.billing.meters.deactivate_async(first.id)
    assert deactivated.status == "inactive" and deactivated.status_transitions.deactivated_at is not None
    with pytest.raises(stripe.InvalidRequestError):
        await env.client.v1.billing.meters.deactivate_async(first.id)
    with pytest.raises(stripe.InvalidRequestError) as still_taken:  # a deactivated meter keeps its name
        await _meter(env)
    assert still_taken.value.param == "event_name"
    other = await _meter(env, "other_calls")
    await env.client.v1.billing.meters.deactivate_async(other.id)
    reactivated = await env.client.v1.billing.meters.reactivate_async(first.id)
    assert reactivated.status == "active" and reactivated.status_transitions.deactivated_at is None
    with pytest.raises(stripe.InvalidRequestError):
        await env.client.v1.billing.meters.reactivate_async(first.id)
    active = await env.client.v1.billing.meters.list_async(params={"status": "active"})
    inactive = await env.client.v1.billing.meters.list_async(params={"status": "inactive"})
    assert [m.id for m in active.data] == [first.id] and [m.id for m in inactive.data] == [other.id]
    types = [e.type for e in (await env.client.v1.events.list_async(params={"limit": 100})).data]
    assert types.count("billing.meter.deactivated") == 2 and types.count("billing.meter.reactivated") == 1


async def test_meter_event_shape_and_identifier_deduplication(env: Env) -> None:
    await _meter(env)
    customer = await env.client.v1.customers.create_async()
    event = await _event(env, customer.id, 3, identifier="call-1")
    assert isinstance(event, stripe.billing.MeterEvent)
    assert event.identifier == "call-1" and event.event_name == "sql_explain"
    assert event.payload.to_dict() == {"stripe_customer_id": customer.id, "value": "3"}
    assert event.timestamp == event.created
    generated = await _event(env, customer.id)
    assert generated.identifier and generated.identifier != "call-1"
    with pytest.raises(stripe.InvalidRequestError) as duplicate:
        await _event(env, customer.id, 5, identifier="call-1")
    assert duplicate.value.http_status == 400
    assert duplicate.value.user_message == "An event already exists with identifier call-1."
    await env.advance(DAY + 1)  # uniqueness holds for a rolling day
    await _event(env, customer.id, 5, identifier="call-1", timestamp=event.timestamp + DAY)


async def test_meter_event_timestamp_bounds(env: Env) -> None:
    await _meter(env)
    customer = await env.client.v1.customers.create_async()
    now = (await _event(env, customer.id)).created
    with pytest.raises(stripe.InvalidRequestError) as old:
        await _event(env, customer.id, timestamp=now - 35 * DAY - 60)
    assert old.value.param == "timestamp" and "35 days" in str(old.value.user_message)
    with pytest.raises(stripe.InvalidRequestError) as future:
        await _event(env, customer.id, timestamp=now + 10 * 60)
    assert future.value.param == "timestamp" and "5 minutes" in str(future.value.user_message)
    await _event(env, customer.id, timestamp=now - 34 * DAY)
    await _event(env, customer.id, timestamp=now + 60)


async def test_events_without_active_meter_are_accepted_then_dropped(env: Env) -> None:
    customer = await env.client.v1.customers.create_async()
    dropped = await _event(env, customer.id, 7, identifier="early")
    assert dropped.identifier == "early"
    meter = await _meter(env)
    await _event(env, customer.id, 2)
    await _event(env, "cus_unknown", 4)
    await env.client.v1.billing.meter_events.create_async(
        params={"event_name": "sql_explain", "payload": {"stripe_customer_id": customer.id, "value": "1.5"}}
    )
    await env.client.v1.billing.meters.deactivate_async(meter.id)
    await _event(env, customer.id, 9)
    codes = [e["code"] for e in env.sandbox.meter_errors]
    assert codes == [
        "no_meter",
        "meter_event_customer_not_found",
        "meter_event_invalid_value",
        "archived_meter",
    ]
    await env.client.v1.billing.meters.reactivate_async(meter.id)
    start = _hour_start(dropped.created) - DAY
    [summary] = (
        await env.client.v1.billing.meters.event_summaries.list_async(
            meter.id, params={"customer": customer.id, "start_time": start, "end_time": start + 2 * DAY}
        )
    ).data
    assert summary.aggregated_value == 2


async def test_summaries_aggregate_per_formula_and_window(env: Env) -> None:
    customer = await env.client.v1.customers.create_async()
    other = await env.client.v1.customers.create_async()
    for name, formula in (("sql_explain", "sum"), ("pings", "count"), ("seats", "last")):
        await _meter(env, name, formula)
    now = (await env.client.v1.customers.retrieve_async(customer.id)).created
    hour = _hour_start(now) - 3 * HOUR
    sent = [(hour + 10, 5), (hour + 20, 7), (hour + HOUR + 5, 1), (hour + HOUR + 6, 4)]
    for timestamp, value in sent:
        for name in ("sql_explain", "pings", "seats"):
            await env.client.v1.billing.meter_events.create_async(
                params={
                    "event_name": name,
                    "payload": {"stripe_customer_id": customer.id, "value": str(value)},
                    "timestamp": timestamp,
                }
            )
    await _event(env, other.id, 100, timestamp=hour + 30)
    meters = {m.event_name: m for m in (await env.client.v1.billing.meters.list_async()).data}

    async def summaries(
        name: str, value_grouping_window: Literal["day", "hour"] | None = None
    ) -> list[stripe.billing.MeterEventSummary]:
        params: MeterEventSummaryListParams = {
            "customer": customer.id,
            "start_time": hour,
            "end_time": hour + 3 * HOUR,
        }
        if value_grouping_window is not None:
            params["value_grouping_window"] = value_grouping_window
        page = await env.client.v1.billing.meters.event_summaries.list_async(meters[name].id, params=params)
        return list(page.data)

    [whole] = await summaries("sql_explain")
    assert isinstance(whole, stripe.billing.MeterEventSummary)
    assert (whole.aggregated_value, whole.start_time, whole.end_time) == (17, hour, hour + 3 * HOUR)
    assert whole.meter == meters["sql_explain"].id and whole.id.startswith("mtrusg_test_")
    assert [s.aggregated_value for s in await summaries("pings")] == [4]
    assert [s.aggregated_value for s in await summaries("seats")] == [4]
    hourly = await summaries("sql_explain", value_grouping_window="hour")
    assert [(s.start_time, s.aggregated_value) for s in hourly] == [
        (hour + 2 * HOUR, 0),
        (hour + HOUR, 5),
        (hour, 12),
    ]
    assert [s.aggregated_value for s in await summaries("seats", value_grouping_window="hour")] == [0, 4, 7]
    first_page = await env.client.v1.billing.meters.event_summaries.list_async(
        meters["sql_explain"].id,
        params={
            "customer": customer.id,
            "start_time": hour,
            "end_time": hour + 3 * HOUR,
            "value_grouping_window": "hour",
            "limit": 2,
        },
    )
    assert first_page.has_more and [s.id for s in first_page.data] == [s.id for s in hourly[:2]]


async def test_summary_parameters_are_validated(env: Env) -> None:
    meter = await _meter(env)
    customer = await env.client.v1.customers.create_async()
    start = customer.created - customer.created % DAY - DAY + HOUR  # hour-aligned, not day-aligned

    async def summaries(**params: Any) -> stripe.ListObject[stripe.billing.MeterEventSummary]:
        # Typed loosely on purpose: the parameters are missing, misaligned or unknown, to be refused.
        return await env.client.v1.billing.meters.event_summaries.list_async(meter.id, params=params)  # type: ignore[arg-type]

    with pytest.raises(stripe.InvalidRequestError) as missing:
        await summaries(customer=customer.id, start_time=start)
    assert missing.value.param == "end_time"
    with pytest.raises(stripe.InvalidRequestError) as unaligned:
        await summaries(customer=customer.id, start_time=start + 1, end_time=start + HOUR)
    assert unaligned.value.param == "start_time"
    with pytest.raises(stripe.InvalidRequestError) as unaligned_day:
        await summaries(
            customer=customer.id, start_time=start, end_time=start + DAY, value_grouping_window="day"
        )
    assert unaligned_day.value.param == "start_time"
    with pytest.raises(stripe.InvalidRequestError) as reversed_range:
        await summaries(customer=customer.id, start_time=start + HOUR, end_time=start)
    assert reversed_range.value.param == "end_time"
    with pytest.raises(stripe.InvalidRequestError) as no_customer:
        await summaries(customer="cus_nope", start_time=start, end_time=start + HOUR)
    assert no_customer.value.param == "customer"


async def test_meter_event_storage_is_bounded(receiver: Any) -> None:
    from .conftest import sandbox_env

    async with sandbox_env(receiver, meter_event_limit=2) as env:
        await _meter(env)
        customer = await env.client.v1.customers.create_async()
        await _event(env, customer.id)
        await _event(env, customer.id)
        with pytest.raises(stripe.InvalidRequestError) as full:
            await _event(env, customer.id)
        assert "at most 2 meter events" in str(full.value.user_message)
    async with sandbox_env(receiver, meter_event_limit=2) as env:  # dropped events count too
        await _event(env, "cus_1")
        await _event(env, "cus_1")
        with pytest.raises(stripe.InvalidRequestError) as full:
            await _event(env, "cus_1")
        assert "at most 2 meter events" in str(full.value.user_message)
        assert [e["code"] for e in env.sandbox.meter_errors] == ["no_meter", "no_meter"]


async def test_meters_and_usage_survive_a_restart(receiver: Any, tmp_path: Any) -> None:
    from .conftest import sandbox_env

    state = tmp_path / "sandbox.json"
    async with sandbox_env(receiver, persist_path=state) as env:
        meter = await _meter(env)
        customer = await env.client.v1.customers.create_async()
        event = await _event(env, customer.id, 6, identifier="once")
    async with sandbox_env(receiver, persist_path=state) as env:
        with pytest.raises(stripe.InvalidRequestError):
            await _event(env, customer.id, 6, identifier="once")
        start = _hour_start(event.timestamp)
        [summary] = (
            await env.client.v1.billing.meters.event_summaries.list_async(
                meter.id, params={"customer": customer.id, "start_time": start, "end_time": start + HOUR}
            )
        ).data
        assert summary.aggregated_value == 6
