"""Checkout Sessions and billing portal sessions over the API."""

from __future__ import annotations

from . import checkout, objects
from .api import Call, Obj, created_filter, includable, paginate
from .errors import invalid_request, parameter_missing, resource_missing
from .forms import Params
from .ids import new_id, new_secret
from .sandbox import Sandbox


def create_session(call: Call) -> Obj:
    call.allow("checkout_session.create")
    return checkout.create_session(call.sandbox, call.params)


def retrieve_session(call: Call) -> Obj:
    return call.sandbox.get("checkout.session", call.path["id"])


def expire_session(call: Call) -> Obj:
    call.allow("checkout_session.expire")
    return checkout.expire_session(call.sandbox, call.sandbox.get("checkout.session", call.path["id"]))


def list_sessions(call: Call) -> Obj:
    call.allow("checkout_session.list")
    params = call.params
    items = call.sandbox.store.newest_first("checkout.session")
    for key in ("customer", "subscription", "payment_intent", "status", "payment_link"):
        value = params.string(key)
        if value is not None:
            items = [item for item in items if item.get(key) == value]
    return paginate(params, created_filter(params, items), call.route_path, "checkout.session")


@includable("checkout.session", "line_items")
def _session_line_items(sandbox: Sandbox, session: Obj) -> Obj:
    session_id = session["id"]
    return objects.list_envelope(
        checkout.line_items(sandbox, session), f"/v1/checkout/sessions/{session_id}/line_items"
    )


def list_line_items(call: Call) -> Obj:
    session = call.sandbox.get("checkout.session", call.path["id"])
    return paginate(call.params, checkout.line_items(call.sandbox, session), call.route_path, "line_item")


def create_portal_session(call: Call) -> Obj:
    call.allow("billing_portal_session.create")
    params, sandbox = call.params, call.sandbox
    customer_id = params.req_str("customer")
    customer = sandbox.store.get("customer", customer_id)
    if customer is None or customer.get("deleted"):
        raise resource_missing("customer", customer_id, param="customer")
    return_url = checkout.url_param(params, "return_url")
    flow = _flow(sandbox, params, customer_id)
    secret = new_secret()
    url = f"{sandbox.config.public_base_url.rstrip('/')}/p/session/{secret}"
    session = objects.portal_session(
        id_=new_id("bps"),
        now=sandbox.now(),
        customer_id=customer_id,
        return_url=return_url,
        url=f"{url}/flow" if flow else url,
    )
    session["flow"] = flow
    sandbox.store.put(session)
    sandbox.store.priv("portal_secrets")[secret] = session["id"]
    return session


def _flow(sandbox: Sandbox, params: Params, customer_id: str) -> Obj | None:
    """`flow_data` as Stripe validates it, shaped as the session's `flow`; None without one."""
    data = params.sub("flow_data")
    if data is None:
        return None
    kind = data.enum(
        "type",
        (
            "payment_method_update",
            "subscription_cancel",
            "subscription_update",
            "subscription_update_confirm",
        ),
        required=True,
    )
    if kind == "subscription_update_confirm":
        raise invalid_request(
            "flow_data[type]=subscription_update_confirm is not implemented by the sandbox.",
            param="flow_data[type]",
        )
    flow: Obj = {
        "after_completion": {"hosted_confirmation": None, "redirect": None, "type": "portal_homepage"},
        "subscription_cancel": None,
        "subscription_update": None,
        "subscription_update_confirm": None,
        "type": kind,
    }
    if kind in ("subscription_cancel", "subscription_update"):
        details = data.sub(str(kind))
        if details is None:
            raise parameter_missing(f"flow_data[{kind}]")
        subscription_id = details.req_str("subscription")
        subscription = sandbox.store.get("subscription", subscription_id)
        if subscription is None or subscription["customer"] != customer_id:
            raise resource_missing("subscription", subscription_id, param=details.param("subscription"))
        if subscription["status"] in ("canceled", "incomplete_expired"):
            raise invalid_request(
                f"The subscription {subscription_id} is "
                f"{subscription['status']} and cannot be changed in the portal.",
                param=details.param("subscription"),
            )
        flow[str(kind)] = {"subscription": subscription_id} | (
            {"retention": None} if kind == "subscription_cancel" else {}
        )
    after = data.sub("after_completion")
    if after is not None:
        after_type = after.enum("type", ("hosted_confirmation", "portal_homepage", "redirect"), required=True)
        flow["after_completion"]["type"] = after_type
        if after_type == "redirect":
            redirect = after.sub("redirect")
            if redirect is None:
                raise parameter_missing("flow_data[after_completion][redirect]")
            target = checkout.url_param(redirect, "return_url")
            if target is None:
                raise parameter_missing("flow_data[after_completion][redirect][return_url]")
            flow["after_completion"]["redirect"] = {"return_url": target}
        elif after_type == "hosted_confirmation":
            flow["after_completion"]["hosted_confirmation"] = {"custom_message": None}
    return flow
