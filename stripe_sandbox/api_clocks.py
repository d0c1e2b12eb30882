"""Stripe's test clocks (`/v1/test_helpers/test_clocks`).

A clock has its own frozen time; customers created with `test_clock` and everything billed to
them (subscriptions, invoices, payments, checkout sessions) live in that time. Advancing answers at
once with `status: advancing` and does the work right after the response on the event loop, so the
clock reads `ready` again once renewals, trial ends and retries up to the new time have run,
the same poll-until-ready flow as on Stripe.
"""

from __future__ import annotations

import asyncio
import logging

from . import billing, objects
from .api import Call, Obj, paginate
from .errors import invalid_request
from .ids import new_id
from .sandbox import Sandbox

log = logging.getLogger(__name__)

MAX_CLOCKS = 100  # Stripe's limit of test clocks per account
KIND = "test_helpers.test_clock"


def create_clock(call: Call) -> Obj:
    p, sb = call.params, call.sb
    frozen_time = p.integer("frozen_time", required=True)
    assert frozen_time is not None
    if len(sb.store.objects[KIND]) >= MAX_CLOCKS:
        raise invalid_request(f"You can have at most {MAX_CLOCKS} test clocks; delete one first.")
    name = p.string("name")
    if name is not None and len(name) > 300:
        raise invalid_request("The name can have up to 300 characters.", param="name")
    clock = objects.test_clock(id_=new_id("clock"), now=sb.now(), frozen_time=frozen_time, name=name)
    sb.store.put(clock)
    sb.emit("test_helpers.test_clock.created", clock)
    return clock


def retrieve_clock(call: Call) -> Obj:
    return call.sb.get(KIND, call.path["id"])


def list_clocks(call: Call) -> Obj:
    return paginate(call.params, call.sb.store.newest_first(KIND), call.route_path, KIND)


def delete_clock(call: Call) -> Obj:
    """Deleting a clock deletes its customers and ends their subscriptions, as on Stripe."""
    sb = call.sb
    clock = sb.get(KIND, call.path["id"])
    with sb.on_clock(clock["id"]):
        for customer in list(sb.store.objects["customer"].values()):
            if customer.get("test_clock") != clock["id"]:
                continue
            for sub in sb.store.objects["subscription"].values():
                if sub["customer"] == customer["id"] and sub["status"] not in (
                    "canceled",
                    "incomplete_expired",
                ):
                    billing.cancel_now(sb, sub, ended_at=sb.now(), reason="cancellation_requested")
            snapshot = sb.snapshot(customer)
            sb.store.put(objects.deleted("customer", customer["id"]))
            sb.emit("customer.deleted", snapshot)
    sb.store.remove(KIND, clock["id"])
    sb.emit("test_helpers.test_clock.deleted", clock)
    return objects.deleted(KIND, clock["id"])


def advance_clock(call: Call) -> Obj:
    p, sb = call.params, call.sb
    clock = sb.get(KIND, call.path["id"])
    target = p.integer("frozen_time", required=True)
    assert target is not None
    if clock["status"] == "advancing":
        raise invalid_request("The test clock is already advancing; wait until it is ready.")
    if target <= clock["frozen_time"]:
        raise invalid_request(
            "The test clock can only be advanced to a time after its current frozen_time.",
            param="frozen_time",
        )
    clock["status"] = "advancing"
    clock["status_details"] = {"advancing": {"target_frozen_time": target}}
    sb.emit("test_helpers.test_clock.advancing", clock)
    asyncio.get_running_loop().call_soon(_finish_advance, sb, clock["id"], target)
    return clock


def _finish_advance(sb: Sandbox, clock_id: str, target: int) -> None:
    clock = sb.store.get(KIND, clock_id)
    if clock is None:
        return
    try:
        billing.advance_to(sb, target, clock_id)
    except Exception:  # the clock must not stay "advancing" for ever
        log.exception("advancing test clock %s failed", clock_id)
        clock["status"] = "internal_failure"
        clock["status_details"] = {}
        sb.save()
        return
    clock["status"] = "ready"
    clock["status_details"] = {}
    clock["frozen_time"] = target
    sb.emit("test_helpers.test_clock.ready", clock)
    sb.save()
