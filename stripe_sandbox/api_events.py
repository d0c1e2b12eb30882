"""Events and webhook endpoints over the API."""

from __future__ import annotations

from fnmatch import fnmatchcase

from . import objects
from .api import Call, Obj, created_filter, paginate
from .checkout import valid_url
from .errors import StripeError, invalid_request, parameter_missing
from .forms import merge_metadata


def retrieve_event(call: Call) -> Obj:
    return call.sandbox.get("event", call.path["id"])


def list_events(call: Call) -> Obj:
    call.allow("event.list")
    params = call.params
    items = call.sandbox.store.newest_first("event")
    type_ = params.string("type")
    types = params.str_list("types")
    if type_ is not None and types is not None:
        raise invalid_request("You may only specify one of these parameters: type, types.", param="types")
    if type_ is not None:
        items = [event for event in items if fnmatchcase(event["type"], type_)]
    if types is not None:
        if len(types) > 20:
            raise invalid_request("You may only specify up to 20 types.", param="types")
        items = [event for event in items if event["type"] in types]
    delivered = params.boolean("delivery_success")
    if delivered is not None:
        items = [event for event in items if (event["pending_webhooks"] == 0) == delivered]
    return paginate(params, created_filter(params, items), call.route_path, "event")


def retry_event(call: Call) -> Obj:
    """`POST /v1/events/{id}/retry`, what the Dashboard's and the Stripe CLI's "Resend" call."""
    call.params.reject_unknown(("for_webhook_endpoint", "expand"))
    event = call.sandbox.get("event", call.path["id"])
    return call.sandbox.resend(event, call.params.string("for_webhook_endpoint"))


def _events_param(call: Call) -> list[str] | None:
    events = call.params.str_list("enabled_events")
    if events is not None and not events:
        raise parameter_missing("enabled_events")
    return events


def _url(call: Call) -> str | None:
    url = call.params.string("url")
    if url is not None and not valid_url(url):
        raise StripeError(
            400, "Invalid URL: URL must be publicly accessible.", param="url", code="url_invalid"
        )
    return url


def create_endpoint(call: Call) -> Obj:
    call.allow("webhook_endpoint.create")
    url = _url(call)
    if url is None:
        raise parameter_missing("url")
    events = _events_param(call)
    if events is None:
        raise parameter_missing("enabled_events")
    endpoint, secret = call.sandbox.add_webhook_endpoint(
        url,
        events,
        description=call.params.string("description"),
        metadata=call.params.metadata() or {},
        api_version=call.params.string("api_version"),
    )
    return {**endpoint, "secret": secret}  # the secret is shown once, on creation, as on Stripe


def retrieve_endpoint(call: Call) -> Obj:
    return call.sandbox.get("webhook_endpoint", call.path["id"])


def update_endpoint(call: Call) -> Obj:
    call.allow("webhook_endpoint.update")
    params = call.params
    endpoint = call.sandbox.get("webhook_endpoint", call.path["id"])
    url = _url(call)
    if url is not None:
        endpoint["url"] = url
    events = _events_param(call)
    if events is not None:
        endpoint["enabled_events"] = events
    if params.has("description"):
        endpoint["description"] = params.string("description", allow_empty=True) or None
    disabled = params.boolean("disabled")
    if disabled is not None:
        endpoint["status"] = "disabled" if disabled else "enabled"
    endpoint["metadata"] = merge_metadata(
        endpoint["metadata"], params.metadata(), whole_cleared=params.raw("metadata") == ""
    )
    return endpoint


def delete_endpoint(call: Call) -> Obj:
    endpoint = call.sandbox.get("webhook_endpoint", call.path["id"])
    call.sandbox.store.remove("webhook_endpoint", endpoint["id"])
    return objects.deleted("webhook_endpoint", endpoint["id"])


def list_endpoints(call: Call) -> Obj:
    call.allow("webhook_endpoint.list")
    return paginate(
        call.params, call.sandbox.store.newest_first("webhook_endpoint"), call.route_path, "webhook_endpoint"
    )
