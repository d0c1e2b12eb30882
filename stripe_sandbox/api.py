"""The request pipeline every `/v1` route shares: auth, parameters, idempotency, expansion, errors.

Order matters and follows Stripe: authentication first (so a bad key never reveals whether a path
exists), then idempotency replay, then the handler. Handlers are synchronous over in-memory state,
so a request's changes and the events it emits are applied atomically with respect to other
requests on the event loop.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from . import params_implemented
from .clocks import advance_to
from .config import API_VERSION
from .errors import (
    StripeError,
    idempotency_mismatch,
    invalid_api_key,
    invalid_request,
    missing_api_key,
    rate_limited,
    resource_missing,
    unsupported_version,
)
from .forms import Params, parse_body, parse_query
from .idempotency import IdempotencyKeys, SavedAnswer
from .ids import new_id
from .objects import list_envelope
from .params_allowed import ALLOWED
from .payments import resolve_payment_method
from .sandbox import REQUEST_CONTEXT, Sandbox

Obj = dict[str, Any]


@dataclass
class Call:
    sandbox: Sandbox
    params: Params
    path: dict[str, str]
    method: str
    route_path: str
    magic: dict[str, Obj] = field(default_factory=dict)  # test PaymentMethod ids made this request

    def payment_method(self, payment_method_id: str, param: str) -> Obj:
        return resolve_payment_method(self.sandbox, payment_method_id, param, self.magic)

    def allow(self, endpoint: str) -> None:
        self.params.reject_unknown(ALLOWED[endpoint])


Handler = Callable[[Call], Obj]


def _json(status: int, body: Obj, headers: dict[str, str]) -> Response:
    return Response(
        json.dumps(body, indent=2), status_code=status, media_type="application/json", headers=headers
    )


def api_key_of(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":  # curl -u sk_test_...: ; Stripe accepts the key as the username
        try:
            return base64.b64decode(value).decode().partition(":")[0]
        except ValueError:
            return ""
    return ""


def secret_key_known(sandbox: Sandbox) -> Callable[[str], bool]:
    return lambda key: key == sandbox.config.api_key or key in sandbox.config.extra_allowed_keys


def authenticated(request: Request, sandbox: Sandbox, known: Callable[[str], bool]) -> str:
    """The request's key, once `known` accepts it, its Stripe-Version is ours and the rate limit
    (when on) lets it through; the matching Stripe error otherwise, in Stripe's order."""
    key = api_key_of(request)
    if key is None:
        raise missing_api_key()
    if not known(key):
        raise invalid_api_key(key)
    asked_version = request.headers.get("stripe-version")
    if asked_version is not None and asked_version != API_VERSION:
        raise unsupported_version(asked_version, API_VERSION)
    if sandbox.config.rate_limit and not sandbox.rate_limiter.allow(key):
        raise rate_limited()
    return key


def route_path(request: Request) -> str:
    root = request.scope.get("root_path", "")
    path: str = request.scope["path"]
    return path[len(root) :] if root and path.startswith(root) else path


async def handle(request: Request, handler: Handler, route: str = "") -> Response:
    """One API request; `route` ("METHOD /template") selects the implemented parameters."""
    sandbox: Sandbox = request.app.state.sandbox
    request_id = new_id("req")
    headers = {"Request-Id": request_id, "Stripe-Version": API_VERSION}
    key: str | None = None
    idempotency_key: str | None = None
    saved: IdempotencyKeys = request.app.state.idempotency
    fingerprint = ""
    try:
        key = authenticated(request, sandbox, secret_key_known(sandbox))
        body = await request.body()
        method = request.method.lower()
        sandbox.request_log.append((request.method, route_path(request)))
        idempotency_key = request.headers.get("idempotency-key") if method == "post" else None
        fingerprint = hashlib.sha256(
            b"\0".join([method.encode(), route_path(request).encode(), body])
        ).hexdigest()
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
            cached = saved.get(key, idempotency_key, sandbox.now())
            if cached is not None:
                if cached.fingerprint != fingerprint:
                    raise idempotency_mismatch(idempotency_key)
                headers["Idempotent-Replayed"] = "true"
                return Response(
                    cached.body, status_code=cached.status, media_type="application/json", headers=headers
                )
        tree = parse_body(body) if method == "post" else parse_query(request.url.query)
        if route:
            params_implemented.check(route, tree)
        if method != "get":
            sandbox.changed()  # whatever the handler does, even if it fails half way
        params = Params(tree)
        token = REQUEST_CONTEXT.set((request_id, idempotency_key))
        try:
            advance_to(sandbox, sandbox.now())  # catch up on what fell due in wall-clock time
            call = Call(sandbox, params, dict(request.path_params), method, route_path(request))
            result = handler(call)
            result = expand(sandbox, sandbox.snapshot(result), params.expand())
        finally:
            REQUEST_CONTEXT.reset(token)
        status = 200
        payload = json.dumps(result, indent=2).encode()
        if method != "get":
            sandbox.save()
    except StripeError as error:
        status = error.status
        payload = json.dumps(error.body(), indent=2).encode()
        if error.status == 401 or error.type == "idempotency_error":
            return Response(payload, status_code=status, media_type="application/json", headers=headers)
    if idempotency_key and key is not None:
        saved.save(key, idempotency_key, SavedAnswer(fingerprint, status, payload, sandbox.now()))
    return Response(payload, status_code=status, media_type="application/json", headers=headers)


# Lists ---------------------------------------------------------------------------------------


def created_filter(params: Params, items: list[Obj], key: str = "created") -> list[Obj]:
    nested = params.sub(key)
    if nested is None:
        exact = params.integer(key) if params.has(key) else None
        return items if exact is None else [item for item in items if item[key] == exact]
    bounds = {operator: nested.integer(operator) for operator in ("gt", "gte", "lt", "lte")}
    result = items
    if bounds["gt"] is not None:
        result = [item for item in result if item[key] > bounds["gt"]]
    if bounds["gte"] is not None:
        result = [item for item in result if item[key] >= bounds["gte"]]
    if bounds["lt"] is not None:
        result = [item for item in result if item[key] < bounds["lt"]]
    if bounds["lte"] is not None:
        result = [item for item in result if item[key] <= bounds["lte"]]
    return result


def page_limit(params: Params) -> int:
    """A list's or search's `limit`: 10 when absent, refused outside Stripe's 1 to 100."""
    limit = params.integer("limit")
    if limit is None:
        return 10
    if limit < 1 or limit > 100:
        raise invalid_request(
            f"This value must be {'greater' if limit < 1 else 'less'} than or equal to "
            f"{1 if limit < 1 else 100} (it currently is '{limit}').",
            param="limit",
        )
    return limit


def paginate(params: Params, items: list[Obj], url: str, kind: str) -> Obj:
    """Stripe cursor pagination over `items`, which must already be newest first."""
    limit = page_limit(params)
    starting_after = params.string("starting_after")
    ending_before = params.string("ending_before")
    ids = [item["id"] for item in items]
    if starting_after is not None:
        if starting_after not in ids:
            raise resource_missing(kind, starting_after, param="starting_after")
        rest = items[ids.index(starting_after) + 1 :]
        page, has_more = rest[:limit], len(rest) > limit
    elif ending_before is not None:
        if ending_before not in ids:
            raise resource_missing(kind, ending_before, param="ending_before")
        rest = items[: ids.index(ending_before)]
        page, has_more = rest[-limit:], len(rest) > limit
    else:
        page, has_more = items[:limit], len(items) > limit
    return list_envelope(page, url, has_more=has_more)


# Expansion -----------------------------------------------------------------------------------

# Fields that are absent unless expanded ("includable" in Stripe's docs).
_INCLUDABLE: dict[tuple[str, str], Callable[[Sandbox, Obj], Obj]] = {}


def includable(
    object_type: str, field: str
) -> Callable[[Callable[[Sandbox, Obj], Obj]], Callable[[Sandbox, Obj], Obj]]:
    def register(function: Callable[[Sandbox, Obj], Obj]) -> Callable[[Sandbox, Obj], Obj]:
        _INCLUDABLE[(object_type, field)] = function
        return function

    return register


def expand(sandbox: Sandbox, obj: Obj, paths: list[str]) -> Obj:
    for path in paths:
        parts = path.split(".")
        if len(parts) > 4:
            raise invalid_request(
                f"You cannot expand more than 4 levels of a property. Property: {path}", param="expand"
            )
        _expand(sandbox, obj, parts, path)
    return obj


def _expand(sandbox: Sandbox, node: Any, parts: list[str], full: str) -> None:
    if isinstance(node, list):
        for element in node:
            _expand(sandbox, element, parts, full)
        return
    if not isinstance(node, dict) or not parts:
        return
    key, rest = parts[0], parts[1:]
    includer = _INCLUDABLE.get((str(node.get("object")), key))
    if key not in node and includer is not None:
        node[key] = includer(sandbox, node)
    elif key not in node:
        raise invalid_request(f"This property cannot be expanded ({key}).", param="expand")
    value = node[key]
    if isinstance(value, str):
        found = sandbox.store.find(value)
        if found is None:
            raise invalid_request(f"This property cannot be expanded ({key}).", param="expand")
        node[key] = value = sandbox.snapshot(found)
    _expand(sandbox, value, rest, full)
