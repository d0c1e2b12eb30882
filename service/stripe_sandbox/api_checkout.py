"""Checkout Sessions and billing portal sessions over the API."""

from __future__ import annotations

from . import checkout, objects
from .api import Call, Obj, created_filter, includable, paginate
from .errors import resource_missing
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
    secret = new_secret()
    session = objects.portal_session(
        id_=new_id("bps"),
        now=sb.now(),
        customer_id=customer_id,
        return_url=return_url,
        url=f"{sb.config.public_base_url.rstrip('/')}/p/session/{secret}",
    )
    sb.store.put(session)
    sb.store.priv("portal_secrets")[secret] = session["id"]
    return session
