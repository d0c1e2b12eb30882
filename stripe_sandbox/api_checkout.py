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
    return checkout.create_session(call.sb, call.params)


def retrieve_session(call: Call) -> Obj:
    return call.sb.get("checkout.session", call.path["id"])


def expire_session(call: Call) -> Obj:
    call.allow("checkout_session.expire")
    return checkout.expire_session(call.sb, call.sb.get("checkout.session", call.path["id"]))


def list_sessions(call: Call) -> Obj:
    call.allow("checkout_session.list")
    p = call.params
    items = call.sb.store.newest_first("checkout.session")
    for key in ("customer", "subscription", "payment_intent", "status", "payment_link"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i.get(key) == value]
    return paginate(p, created_filter(p, items), call.route_path, "checkout.session")


@includable("checkout.session", "line_items")
def _session_line_items(sb: Sandbox, session: Obj) -> Obj:
    session_id = session["id"]
    return objects.list_envelope(
        checkout.line_items(sb, session), f"/v1/checkout/sessions/{session_id}/line_items"
    )


def list_line_items(call: Call) -> Obj:
    session = call.sb.get("checkout.session", call.path["id"])
    return paginate(call.params, checkout.line_items(call.sb, session), call.route_path, "line_item")


def create_portal_session(call: Call) -> Obj:
    call.allow("billing_portal_session.create")
    p, sb = call.params, call.sb
    customer_id = p.req_str("customer")
    customer = sb.store.get("customer", customer_id)
    if customer is None or customer.get("deleted"):
        raise resource_missing("customer", customer_id, param="customer")
    return_url = checkout._url_param(p, "return_url")
    flow = _flow(sb, p, customer_id)
    secret = new_secret()
    url = f"{sb.config.public_base_url.rstrip('/')}/p/session/{secret}"
    session = objects.portal_session(
        id_=new_id("bps"),
        now=sb.now(),
        customer_id=customer_id,
        return_url=return_url,
        url=f"{url}/flow" if flow else url,
    )
    session["flow"] = flow
    sb.store.put(session)
    sb.store.priv("portal_secrets")[secret] = session["id"]
    return session


def _flow(sb: Sandbox, p: Params, customer_id: str) -> Obj | None:
    """`flow_data` as Stripe validates it, shaped as the session's `flow`; None without one."""
    data = p.sub("flow_data")
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
        sub_id = details.req_str("subscription")
        sub = sb.store.get("subscription", sub_id)
        if sub is None or sub["customer"] != customer_id:
            raise resource_missing("subscription", sub_id, param=details.param("subscription"))
        if sub["status"] in ("canceled", "incomplete_expired"):
            raise invalid_request(
                f"The subscription {sub_id} is {sub['status']} and cannot be changed in the portal.",
                param=details.param("subscription"),
            )
        flow[str(kind)] = {"subscription": sub_id} | (
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
            target = checkout._url_param(redirect, "return_url")
            if target is None:
                raise parameter_missing("flow_data[after_completion][redirect][return_url]")
            flow["after_completion"]["redirect"] = {"return_url": target}
        elif after_type == "hosted_confirmation":
            flow["after_completion"]["hosted_confirmation"] = {"custom_message": None}
    return flow
