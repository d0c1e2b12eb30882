"""Builders for Billing Meters, meter events and meter event summaries.

Same rule as `objects`: exactly the top-level keys of Stripe's example objects in fixtures3.json,
so stripe-python deserialises them into `billing.Meter`, `billing.MeterEvent` and
`billing.MeterEventSummary`.
"""

from __future__ import annotations

from .objects import Obj


def meter(
    *,
    id_: str,
    now: int,
    display_name: str,
    event_name: str,
    formula: str,
    customer_payload_key: str,
    value_payload_key: str,
    event_time_window: str | None,
) -> Obj:
    return {
        "id": id_,
        "object": "billing.meter",
        "created": now,
        "customer_mapping": {"event_payload_key": customer_payload_key, "type": "by_id"},
        "default_aggregation": {"formula": formula},
        "display_name": display_name,
        "event_name": event_name,
        "event_time_window": event_time_window,
        "livemode": False,
        "status": "active",
        "status_transitions": {"deactivated_at": None},
        "updated": now,
        "value_settings": {"event_payload_key": value_payload_key},
    }


def meter_event(
    *, now: int, event_name: str, identifier: str, payload: dict[str, str], timestamp: int
) -> Obj:
    return {
        "object": "billing.meter_event",
        "created": now,
        "event_name": event_name,
        "identifier": identifier,
        "livemode": False,
        "payload": payload,
        "timestamp": timestamp,
    }


def meter_event_summary(*, id_: str, meter_id: str, start: int, end: int, value: int) -> Obj:
    return {
        "id": id_,
        "object": "billing.meter_event_summary",
        "aggregated_value": value,
        "end_time": end,
        "livemode": False,
        "meter": meter_id,
        "start_time": start,
    }
