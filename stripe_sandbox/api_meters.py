"""Billing Meters, meter events and meter event summaries over the API."""

from __future__ import annotations

from . import meters
from . import objects_meters as objects_meters
from .api import Call, Obj, paginate
from .errors import invalid_request, parameter_missing, resource_missing
from .forms import Params
from .ids import new_id

MAX_DISPLAY_NAME = 250
MAX_NAME = 100  # event names, payload keys and identifiers
MAX_PAYLOAD_KEYS = 50
MAX_PAYLOAD_VALUE = 500
MAX_SUMMARY_WINDOWS = 10_000


def _bounded(params: Params, key: str, limit: int, *, required: bool = False) -> str | None:
    value = params.string(key, required=required)
    if value is not None and len(value) > limit:
        raise invalid_request(
            f"Invalid string: {value[:20]}...; must be at most {limit} characters", param=params.param(key)
        )
    return value


def _payload_key(params: Params | None, default: str) -> str:
    if params is None:
        return default
    value = _bounded(params, "event_payload_key", MAX_NAME, required=True)
    assert value is not None
    return value


def _event_name_free(call: Call, event_name: str) -> None:
    """An event name belongs to one meter for good: a deactivated meter keeps it (reactivate that
    meter to use the name again), as on Stripe, where meters cannot be deleted."""
    holder = next(
        (
            meter
            for meter in call.sandbox.store.objects["billing.meter"].values()
            if meter["event_name"] == event_name
        ),
        None,
    )
    if holder is not None:
        raise invalid_request(
            f"A meter with the event_name `{event_name}` already exists ({holder['id']}, "
            f"{holder['status']}).",
            param="event_name",
        )


def create_meter(call: Call) -> Obj:
    call.allow("billing.meter.create")
    params, sandbox = call.params, call.sandbox
    display_name = _bounded(params, "display_name", MAX_DISPLAY_NAME, required=True)
    event_name = _bounded(params, "event_name", MAX_NAME, required=True)
    assert display_name is not None
    assert event_name is not None
    aggregation = params.sub("default_aggregation")
    if aggregation is None:
        raise parameter_missing("default_aggregation")
    formula = str(aggregation.enum("formula", meters.FORMULAS, required=True))
    mapping = params.sub("customer_mapping")
    if mapping is not None:
        mapping.enum("type", ("by_id",), required=True)
    window = params.enum("event_time_window", ("day", "hour"))
    _event_name_free(call, event_name)
    meter = objects_meters.meter(
        id_=new_id("mtr_test"),
        now=sandbox.now(),
        display_name=display_name,
        event_name=event_name,
        formula=formula,
        customer_payload_key=_payload_key(mapping, "stripe_customer_id"),
        value_payload_key=_payload_key(params.sub("value_settings"), "value"),
        event_time_window=window,
    )
    sandbox.store.put(meter)
    sandbox.emit("billing.meter.created", meter)
    return meter


def retrieve_meter(call: Call) -> Obj:
    return call.sandbox.get("billing.meter", call.path["id"])


def update_meter(call: Call) -> Obj:
    call.allow("billing.meter.update")
    params, sandbox = call.params, call.sandbox
    meter = sandbox.get("billing.meter", call.path["id"])
    before = sandbox.snapshot(meter)
    if params.has("display_name"):
        name = _bounded(params, "display_name", MAX_DISPLAY_NAME, required=True)
        meter["display_name"] = name
    if meter != before:
        meter["updated"] = sandbox.now()
        sandbox.emit("billing.meter.updated", meter, {"display_name": before["display_name"]})
    return meter


def deactivate_meter(call: Call) -> Obj:
    sandbox = call.sandbox
    meter = sandbox.get("billing.meter", call.path["id"])
    if meter["status"] != "active":
        raise invalid_request(f"The meter {meter['id']} is already inactive.")
    now = sandbox.now()
    meter.update(status="inactive", updated=now)
    meter["status_transitions"]["deactivated_at"] = now
    sandbox.emit("billing.meter.deactivated", meter)
    return meter


def reactivate_meter(call: Call) -> Obj:
    sandbox = call.sandbox
    meter = sandbox.get("billing.meter", call.path["id"])
    if meter["status"] == "active":
        raise invalid_request(f"The meter {meter['id']} is already active.")
    meter.update(status="active", updated=sandbox.now())
    meter["status_transitions"]["deactivated_at"] = None
    sandbox.emit("billing.meter.reactivated", meter)
    return meter


def list_meters(call: Call) -> Obj:
    call.allow("billing.meter.list")
    params = call.params
    items = call.sandbox.store.newest_first("billing.meter")
    status = params.enum("status", ("active", "inactive"))
    if status is not None:
        items = [meter for meter in items if meter["status"] == status]
    return paginate(params, items, call.route_path, "billing.meter")


def create_meter_event(call: Call) -> Obj:
    call.allow("billing.meter_event.create")
    params, sandbox = call.params, call.sandbox
    event_name = _bounded(params, "event_name", MAX_NAME, required=True)
    assert event_name is not None
    raw = params.raw("payload")
    if raw is None or raw == "" or raw == {}:
        raise parameter_missing("payload")
    if not isinstance(raw, dict):
        raise invalid_request("Invalid hash: payload", param="payload")
    if len(raw) > MAX_PAYLOAD_KEYS:
        raise invalid_request(f"The payload can have up to {MAX_PAYLOAD_KEYS} keys.", param="payload")
    payload: dict[str, str] = {}
    for key, value in raw.items():
        name = f"payload[{key}]"
        if not isinstance(value, str):
            raise invalid_request(f"Invalid string: {name}", param=name)
        if len(key) > MAX_NAME or len(value) > MAX_PAYLOAD_VALUE:
            raise invalid_request(
                f"Payload keys can have up to {MAX_NAME} characters and values up to {MAX_PAYLOAD_VALUE}.",
                param=name,
            )
        payload[key] = value
    identifier = _bounded(params, "identifier", MAX_NAME)
    return meters.record_event(
        sandbox,
        event_name=event_name,
        payload=payload,
        identifier=identifier,
        timestamp=params.integer("timestamp"),
    )


_WINDOWS = {"hour": 3600, "day": 86400}


def list_event_summaries(call: Call) -> Obj:
    call.allow("billing.meter.list_event_summaries")
    params, sandbox = call.params, call.sandbox
    meter = sandbox.get("billing.meter", call.path["id"])
    customer_id = params.req_str("customer")
    customer = sandbox.store.get("customer", customer_id)
    if customer is None or customer.get("deleted"):
        raise resource_missing("customer", customer_id, param="customer")
    start = params.integer("start_time", required=True)
    end = params.integer("end_time", required=True)
    assert start is not None
    assert end is not None
    window_name = params.enum("value_grouping_window", tuple(_WINDOWS))
    for key, value in (("start_time", start), ("end_time", end)):
        if value % 60:
            raise invalid_request(f"`{key}` must be aligned with minute boundaries.", param=key)
    if end <= start:
        raise invalid_request("`end_time` must be after `start_time`.", param="end_time")
    window = None if window_name is None else _WINDOWS[window_name]
    if window is not None:
        for key, value in (("start_time", start), ("end_time", end)):
            if value % window:
                raise invalid_request(
                    f"`{key}` must be aligned with {window_name} boundaries when "
                    f"`value_grouping_window` is {window_name}.",
                    param=key,
                )
        if (end - start) // window > MAX_SUMMARY_WINDOWS:
            raise invalid_request(
                f"The sandbox summarises at most {MAX_SUMMARY_WINDOWS} windows at a time; "
                "narrow start_time and end_time.",
                param="value_grouping_window",
            )
    items = meters.summaries(sandbox, meter, customer_id, start, end, window)
    return paginate(params, items, call.route_path, "billing.meter_event_summary")
