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

from . import billing, clocks, objects
from .api import Call, Obj, paginate
from .errors import invalid_request
from .ids import new_id
from .sandbox import Sandbox

log = logging.getLogger(__name__)

MAX_CLOCKS = 100  # Stripe's limit of test clocks per account
KIND = "test_helpers.test_clock"


def create_clock(call: Call) -> Obj:
    params, sandbox = call.params, call.sandbox
    frozen_time = params.integer("frozen_time", required=True)
    assert frozen_time is not None
    if len(sandbox.store.objects[KIND]) >= MAX_CLOCKS:
        raise invalid_request(f"You can have at most {MAX_CLOCKS} test clocks; delete one first.")
    name = params.string("name")
    if name is not None and len(name) > 300:
        raise invalid_request("The name can have up to 300 characters.", param="name")
    clock = objects.test_clock(id_=new_id("clock"), now=sandbox.now(), frozen_time=frozen_time, name=name)
    sandbox.store.put(clock)
    sandbox.emit("test_helpers.test_clock.created", clock)
    return clock


def retrieve_clock(call: Call) -> Obj:
    return call.sandbox.get(KIND, call.path["id"])


def list_clocks(call: Call) -> Obj:
    return paginate(call.params, call.sandbox.store.newest_first(KIND), call.route_path, KIND)


def delete_clock(call: Call) -> Obj:
    """Deleting a clock deletes its customers and ends their subscriptions, as on Stripe."""
    sandbox = call.sandbox
    clock = sandbox.get(KIND, call.path["id"])
    with sandbox.on_clock(clock["id"]):
        for customer in list(sandbox.store.objects["customer"].values()):
            if customer.get("test_clock") != clock["id"]:
                continue
            for subscription in sandbox.store.objects["subscription"].values():
                if subscription["customer"] == customer["id"] and subscription["status"] not in (
                    "canceled",
                    "incomplete_expired",
                ):
                    billing.cancel_now(
                        sandbox, subscription, ended_at=sandbox.now(), reason="cancellation_requested"
                    )
            snapshot = sandbox.snapshot(customer)
            sandbox.store.put(objects.deleted("customer", customer["id"]))
            sandbox.emit("customer.deleted", snapshot)
    sandbox.store.remove(KIND, clock["id"])
    sandbox.emit("test_helpers.test_clock.deleted", clock)
    return objects.deleted(KIND, clock["id"])


def advance_clock(call: Call) -> Obj:
    params, sandbox = call.params, call.sandbox
    clock = sandbox.get(KIND, call.path["id"])
    target = params.integer("frozen_time", required=True)
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
    sandbox.emit("test_helpers.test_clock.advancing", clock)
    asyncio.get_running_loop().call_soon(_finish_advance, sandbox, clock["id"], target)
    return clock


def _finish_advance(sandbox: Sandbox, clock_id: str, target: int) -> None:
    clock = sandbox.store.get(KIND, clock_id)
    if clock is None:
        return
    try:
        clocks.advance_to(sandbox, target, clock_id)
    except Exception:  # the clock must not stay "advancing" for ever
        log.exception("advancing test clock %s failed", clock_id)
        clock["status"] = "internal_failure"
        clock["status_details"] = {}
        sandbox.save()
        return
    clock["status"] = "ready"
    clock["status_details"] = {}
    clock["frozen_time"] = target
    sandbox.emit("test_helpers.test_clock.ready", clock)
    sandbox.save()
