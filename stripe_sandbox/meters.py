"""Billing Meters: accepting meter events and aggregating them, as Stripe's usage-based billing does.

Stripe validates a meter event's shape, timestamp and identifier when it is created (400 on a
problem) but matches it to a meter and a customer later, asynchronously: an event for an unknown
or deactivated meter, an unknown customer or a value that is not a whole number is accepted (200)
and then dropped, reported through the meter's error reports. The sandbox does the same and keeps
those reports in `Sandbox.meter_errors` (Stripe's error codes, e.g. `no_meter`), for tests.

Accepted events are kept per meter as compact rows `[timestamp, value, customer, created]`; usage
over `[start, end)` is their `sum`, their `count`, or the `last` value by timestamp.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any

from . import objects_meters as objects_meters
from .errors import StripeError, invalid_request
from .sandbox import Sandbox

Obj = dict[str, Any]
DAY = 86400
PAST_WINDOW = 35 * DAY
FUTURE_WINDOW = 5 * 60
IDENTIFIER_WINDOW = DAY
FORMULAS = ("count", "last", "sum")
_WHOLE = re.compile(r"^-?\d{1,15}$")


def active_meter(sandbox: Sandbox, event_name: str) -> Obj | None:
    return next(
        (
            candidate
            for candidate in sandbox.store.objects["billing.meter"].values()
            if candidate["event_name"] == event_name and candidate["status"] == "active"
        ),
        None,
    )


def _customer_now(sandbox: Sandbox, customer_id: str | None) -> int:
    """Now, as the customer the event is for sees it (its test clock's time, if it has one)."""
    with sandbox.on_clock(sandbox.clock_of(customer_id)):
        return sandbox.now()


def _full(sandbox: Sandbox) -> StripeError:
    return StripeError(
        400,
        f"The sandbox keeps at most {sandbox.config.meter_event_limit} meter events "
        "(SandboxConfig.meter_event_limit); this one was not recorded.",
    )


def _check_identifier(sandbox: Sandbox, identifier: str, now: int) -> None:
    """Stripe's rolling 24-hour uniqueness; identifiers older than that are forgotten when the
    table is full, and a table still full of fresh ones refuses the event."""
    seen = sandbox.store.meter_identifiers
    first = seen.get(identifier)
    if first is not None and now - first < IDENTIFIER_WINDOW:
        raise invalid_request(f"An event already exists with identifier {identifier}.", param="identifier")
    if len(seen) >= sandbox.config.meter_event_limit:
        _forget_old_identifiers(sandbox, now)
        if len(seen) >= sandbox.config.meter_event_limit:
            raise _full(sandbox)


def _forget_old_identifiers(sandbox: Sandbox, now: int) -> None:
    seen = sandbox.store.meter_identifiers
    for key in [identifier for identifier, at in seen.items() if now - at >= IDENTIFIER_WINDOW]:
        del seen[key]


def _report(sandbox: Sandbox, code: str, message: str, event: Obj, meter_id: str | None) -> None:
    sandbox.meter_errors.append(
        {"code": code, "message": message, "meter": meter_id, "identifier": event["identifier"]}
    )


def record_event(
    sandbox: Sandbox,
    *,
    event_name: str,
    payload: dict[str, str],
    identifier: str | None,
    timestamp: int | None,
) -> Obj:
    """`billing.meter_events.create`: validate now, aggregate (or drop with an error report) now."""
    meter = active_meter(sandbox, event_name)
    customer_key = meter["customer_mapping"]["event_payload_key"] if meter else "stripe_customer_id"
    customer_id = payload.get(customer_key)
    now = _customer_now(sandbox, customer_id)
    if timestamp is None:
        timestamp = now
    elif timestamp < now - PAST_WINDOW:
        raise invalid_request(
            "The event timestamp cannot be more than 35 days in past. Expected a timestamp greater than "
            f"or equal to {now - PAST_WINDOW}.",
            param="timestamp",
        )
    elif timestamp > now + FUTURE_WINDOW:
        raise invalid_request(
            "The event timestamp cannot be more than 5 minutes in future. Expected a timestamp less than "
            f"or equal to {now + FUTURE_WINDOW}.",
            param="timestamp",
        )
    created = sandbox.now()
    if identifier is None:
        identifier = str(uuid.uuid4())
    _check_identifier(sandbox, identifier, created)
    stored = sum(len(rows) for rows in sandbox.store.meter_events.values())
    if stored >= sandbox.config.meter_event_limit:
        raise _full(sandbox)
    sandbox.store.meter_identifiers[identifier] = created
    event = objects_meters.meter_event(
        now=created, event_name=event_name, identifier=identifier, payload=payload, timestamp=timestamp
    )
    _aggregate(sandbox, meter, event, customer_key)
    return event


def has_room(sandbox: Sandbox, count: int) -> bool:
    """Whether `count` more events (and their identifiers) fit under
    `SandboxConfig.meter_event_limit`; identifiers older than 24 hours are forgotten first."""
    limit = sandbox.config.meter_event_limit
    seen = sandbox.store.meter_identifiers
    if len(seen) + count > limit:
        _forget_old_identifiers(sandbox, sandbox.now())
    stored = sum(len(rows) for rows in sandbox.store.meter_events.values())
    return stored + count <= limit and len(seen) + count <= limit


def record_streamed_event(
    sandbox: Sandbox,
    *,
    event_name: str,
    payload: dict[str, str],
    identifier: str | None,
    timestamp: int | None,
) -> None:
    """One event of a v2 meter event stream: everything is checked asynchronously there, so a
    timestamp out of range becomes an error report, and an identifier seen in the last 24 hours
    is dropped as a duplicate (the caller checked `has_room` for the whole request)."""
    meter = active_meter(sandbox, event_name)
    customer_key = meter["customer_mapping"]["event_payload_key"] if meter else "stripe_customer_id"
    now = _customer_now(sandbox, payload.get(customer_key))
    created = sandbox.now()
    event = objects_meters.meter_event(
        now=created,
        event_name=event_name,
        identifier=identifier or str(uuid.uuid4()),
        payload=payload,
        timestamp=now if timestamp is None else timestamp,
    )
    meter_id = meter["id"] if meter else None
    if event["timestamp"] < now - PAST_WINDOW:
        message = "The event timestamp is more than 35 days in the past."
        _report(sandbox, "timestamp_too_far_in_past", message, event, meter_id)
        return
    if event["timestamp"] > now + FUTURE_WINDOW:
        message = "The event timestamp is more than 5 minutes in the future."
        _report(sandbox, "timestamp_in_future", message, event, meter_id)
        return
    seen = sandbox.store.meter_identifiers
    first = seen.get(event["identifier"])
    if first is not None and created - first < IDENTIFIER_WINDOW:
        return
    seen[event["identifier"]] = created
    _aggregate(sandbox, meter, event, customer_key)


def _aggregate(sandbox: Sandbox, meter: Obj | None, event: Obj, customer_key: str) -> None:
    """Stripe's asynchronous half: attach the event to its meter and customer, or report why not."""
    payload: dict[str, str] = event["payload"]
    if meter is None:
        inactive = any(
            candidate["event_name"] == event["event_name"]
            for candidate in sandbox.store.objects["billing.meter"].values()
        )
        if inactive:
            _report(sandbox, "archived_meter", "The meter for this event is deactivated.", event, None)
        else:
            _report(
                sandbox,
                "no_meter",
                f"No active meter found for event name {event['event_name']}.",
                event,
                None,
            )
        return
    customer_id = payload.get(customer_key)
    if customer_id is None:
        _report(
            sandbox,
            "meter_event_no_customer_defined",
            f"The payload has no `{customer_key}`.",
            event,
            meter["id"],
        )
        return
    customer = sandbox.store.get("customer", customer_id)
    if customer is None or customer.get("deleted"):
        _report(
            sandbox, "meter_event_customer_not_found", f"No such customer: {customer_id}", event, meter["id"]
        )
        return
    value = 1
    if meter["default_aggregation"]["formula"] != "count":
        value_key = meter["value_settings"]["event_payload_key"]
        raw = payload.get(value_key)
        if raw is None:
            _report(
                sandbox,
                "meter_event_value_not_found",
                f"The payload has no `{value_key}`.",
                event,
                meter["id"],
            )
            return
        if not _WHOLE.match(raw):
            _report(
                sandbox,
                "meter_event_invalid_value",
                f"`{value_key}` must be a whole number: {raw}",
                event,
                meter["id"],
            )
            return
        value = int(raw)
    rows = sandbox.store.meter_events.setdefault(meter["id"], [])
    rows.append([event["timestamp"], value, customer_id, event["created"]])


def _rows(sandbox: Sandbox, meter: Obj, customer_id: str, start: int, end: int) -> list[list[Any]]:
    return [
        row
        for row in sandbox.store.meter_events.get(meter["id"], [])
        if row[2] == customer_id and start <= row[0] < end
    ]


def _combine(formula: str, rows: list[list[Any]]) -> int:
    if formula == "count":
        return len(rows)
    if formula == "last":
        if not rows:
            return 0
        latest = max(range(len(rows)), key=lambda item: (rows[item][0], item))  # ties: the later arrival
        return int(rows[latest][1])
    return sum(int(row[1]) for row in rows)


def usage(sandbox: Sandbox, meter: Obj, customer_id: str, start: int, end: int) -> int:
    """The meter's aggregate for one customer over `[start, end)`."""
    return _combine(meter["default_aggregation"]["formula"], _rows(sandbox, meter, customer_id, start, end))


def summary_id(meter_id: str, customer_id: str, start: int, end: int) -> str:
    """Stable per window, so that pages of summaries can be walked with `starting_after`."""
    digest = hashlib.sha256(f"{meter_id}|{customer_id}|{start}|{end}".encode()).hexdigest()
    return f"mtrusg_test_{digest[:32]}"


def summaries(
    sandbox: Sandbox, meter: Obj, customer_id: str, start: int, end: int, window: int | None
) -> list[Obj]:
    """One summary for `[start, end)`, or one per `window` seconds, newest first as Stripe lists them."""
    step = end - start if window is None else window
    buckets: dict[int, list[list[Any]]] = {}
    for row in _rows(sandbox, meter, customer_id, start, end):  # arrival order is kept within a bucket
        buckets.setdefault((int(row[0]) - start) // step, []).append(row)
    formula = meter["default_aggregation"]["formula"]
    result = []
    for index in reversed(range((end - start + step - 1) // step)):
        window_start, window_end = start + index * step, min(start + (index + 1) * step, end)
        result.append(
            objects_meters.meter_event_summary(
                id_=summary_id(meter["id"], customer_id, window_start, window_end),
                meter_id=meter["id"],
                start=window_start,
                end=window_end,
                value=_combine(formula, buckets.get(index, [])),
            )
        )
    return result
