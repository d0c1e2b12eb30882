"""Meter event streams (API v2): a short-lived session, then up to 100 meter events a request.

`POST /v2/billing/meter_event_session` (the secret key) answers a `v2.billing.meter_event_session`
whose `authentication_token` is good for `SandboxConfig.meter_event_session_seconds` (15 minutes, as
on Stripe). `POST /v2/billing/meter_event_stream`, authenticated with that token, takes
`{"events": [...]}` as JSON. Only the request's shape is checked at once (400); each event is then
handled as Stripe handles it asynchronously: one outside the timestamp window, or that no meter or
customer matches, goes to the error reports (`Sandbox.meter_errors`), and an identifier seen in the
last 24 hours is dropped as a duplicate. An expired token gets 401 `temporary_session_expired`, which
stripe-python raises as `TemporarySessionExpiredError`. Bodies are JSON, errors are Stripe's shape;
there is no idempotent replay here (the events' identifiers already make a resend harmless).
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from . import meters
from .api import authenticated, route_path, secret_key_known
from .api_meters import MAX_NAME, MAX_PAYLOAD_KEYS, MAX_PAYLOAD_VALUE
from .config import API_VERSION
from .errors import StripeError, invalid_request
from .ids import new_id
from .sandbox import Sandbox

Obj = dict[str, Any]
MAX_EVENTS = 100
MAX_BODY_BYTES = 1 << 20
MAX_SESSIONS = 1000  # live sessions kept; the oldest is forgotten past this


def _rfc3339(timestamp: int) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _session_expired() -> StripeError:
    return StripeError(
        401,
        "The meter event session has expired; create a new one.",
        type_="temporary_session_expired",
        code="billing_meter_event_session_expired",
    )


async def _body(request: Request) -> Obj:
    """The JSON object sent, at most MAX_BODY_BYTES."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise StripeError(413, f"The request body is larger than {MAX_BODY_BYTES} bytes.")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise invalid_request("The request body is not valid JSON.") from exc
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")
    return body


def _answer(status: int, body: Obj, request_id: str) -> Response:
    return Response(
        json.dumps(body),
        status_code=status,
        media_type="application/json",
        headers={"Request-Id": request_id, "Stripe-Version": API_VERSION},
    )


async def create_session(request: Request) -> Response:
    sandbox: Sandbox = request.app.state.sandbox
    request_id = new_id("req")
    try:
        authenticated(request, sandbox, secret_key_known(sandbox))
        sandbox.request_log.append((request.method, route_path(request)))
        if await _body(request):
            raise invalid_request("This endpoint takes no parameters.")
        now = sandbox.now()
        sessions = sandbox.meter_event_sessions
        for token in [token for token, expires in sessions.items() if expires <= now]:
            del sessions[token]
        while len(sessions) >= MAX_SESSIONS:
            del sessions[next(iter(sessions))]
        token = f"mes_tok_test_{secrets.token_urlsafe(24)}"
        expires_at = now + sandbox.config.meter_event_session_seconds
        sessions[token] = expires_at
        session = {
            "id": new_id("mes"),
            "object": "v2.billing.meter_event_session",
            "authentication_token": token,
            "created": _rfc3339(now),
            "expires_at": _rfc3339(expires_at),
            "livemode": False,
        }
    except StripeError as error:
        return _answer(error.status, error.body(), request_id)
    return _answer(200, session, request_id)


async def create_events(request: Request) -> Response:
    sandbox: Sandbox = request.app.state.sandbox
    request_id = new_id("req")
    try:
        token = authenticated(request, sandbox, sandbox.meter_event_sessions.__contains__)
        if sandbox.meter_event_sessions[token] <= sandbox.now():
            raise _session_expired()
        sandbox.request_log.append((request.method, route_path(request)))
        events = [_event(raw, index) for index, raw in enumerate(_events(await _body(request)))]
        if not meters.has_room(sandbox, len(events)):
            raise StripeError(
                400,
                f"The sandbox keeps at most {sandbox.config.meter_event_limit} meter events "
                "(SandboxConfig.meter_event_limit); none of these was recorded.",
            )
        sandbox.changed()
        for event in events:
            meters.record_streamed_event(sandbox, **event)
        sandbox.save()
    except StripeError as error:
        return _answer(error.status, error.body(), request_id)
    return _answer(200, {}, request_id)


def _events(body: Obj) -> list[Any]:
    unknown = sorted(set(body) - {"events"})
    if unknown:
        raise invalid_request(f"Received unknown parameter: {unknown[0]}", param=unknown[0])
    events = body.get("events")
    if not isinstance(events, list) or not events:
        raise invalid_request("`events` must be a list of 1 to 100 meter events.", param="events")
    if len(events) > MAX_EVENTS:
        raise invalid_request(f"`events` can hold at most {MAX_EVENTS} meter events.", param="events")
    return events


def _string(raw: Obj, key: str, param: str, *, required: bool) -> str | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise invalid_request(f"`{param}` must be a string of 1 to {MAX_NAME} characters.", param=param)
    return value


def _event(raw: Any, index: int) -> Obj:
    """One event's shape, checked at once; what it means is checked later (`record_streamed_event`)."""
    where = f"events[{index}]"
    if not isinstance(raw, dict):
        raise invalid_request(f"`{where}` must be an object.", param=where)
    unknown = sorted(set(raw) - {"event_name", "identifier", "payload", "timestamp"})
    if unknown:
        param = f"{where}.{unknown[0]}"
        raise invalid_request(f"Received unknown parameter: {param}", param=param)
    event_name = _string(raw, "event_name", f"{where}.event_name", required=True)
    identifier = _string(raw, "identifier", f"{where}.identifier", required=False)
    payload = raw.get("payload")
    if not isinstance(payload, dict) or not payload or len(payload) > MAX_PAYLOAD_KEYS:
        raise invalid_request(
            f"`{where}.payload` must be an object of 1 to {MAX_PAYLOAD_KEYS} strings.",
            param=f"{where}.payload",
        )
    for key, value in payload.items():
        if not isinstance(value, str) or len(key) > MAX_NAME or len(value) > MAX_PAYLOAD_VALUE:
            raise invalid_request(
                f"`{where}.payload` keys can have up to {MAX_NAME} characters and string values up to "
                f"{MAX_PAYLOAD_VALUE}.",
                param=f"{where}.payload.{key[:MAX_NAME]}",
            )
    timestamp = raw.get("timestamp")
    seconds: int | None = None
    if timestamp is not None:
        try:
            if not isinstance(timestamp, str) or len(timestamp) > 40:
                raise ValueError(timestamp)
            moment = datetime.fromisoformat(timestamp)
            if moment.tzinfo is None:
                raise ValueError(timestamp)
        except ValueError as exc:
            raise invalid_request(
                f"`{where}.timestamp` must be an RFC 3339 time with an offset, e.g. 2026-01-31T12:00:00Z.",
                param=f"{where}.timestamp",
            ) from exc
        seconds = int(moment.timestamp())
    return {
        "event_name": event_name,
        "payload": dict(payload),
        "identifier": identifier,
        "timestamp": seconds,
    }
