"""Who and what a log line is about: request id, user id, elicitation id, carried in a contextvar.

`RequestContextMiddleware` (pure ASGI, outermost) gives every HTTP request an id: the caller's
`X-Request-ID` when it is well formed, a fresh one otherwise, echoed on the response. Code that
learns who the user is, or which elicitation is involved, calls `bind(...)`.

The context is a mutable object shared by reference: the MCP SDK runs tool handlers in a copy of
the HTTP request's contextvars, so a `bind` inside a tool call still reaches the request's access
log line. A tool call gets a child context (`enter_child()`) so it can tell what was bound during it,
and `note`s its outcome on the request's context, so a request is one line: the access line.

A client that goes away before its response is complete, or cancels the tool call the request
carried, is logged with status 499 (nginx's "client closed request"), whatever the app answered
after: it is not a server error. The same status, the method and the route template are counted
(`RequestCounter`).
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Iterable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry import propagate, trace
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.observability.records import emit
from service.observability.redaction import scrub
from service.observability.tracing import describe_request

REQUEST_ID_HEADER = "x-request-id"
_REQUEST_ID_HEADER_BYTES = REQUEST_ID_HEADER.encode()
_TRACE_HEADERS = frozenset({b"traceparent", b"tracestate", b"baggage"})  # W3C trace context
_VALID_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# Probes and scrapes would drown the access log; they are logged at DEBUG.
QUIET_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
CLIENT_CLOSED_REQUEST = 499
CANCELLED = "cancelled"  # the outcome a cancelled tool call notes: its caller gave up on it

OTHER_ROUTE = "other"  # no route matched: the 404s, whatever their path

access_logger = logging.getLogger("service.access")


class RequestCounter(Protocol):
    def http_request(self, method: str, route: str, status: int) -> None: ...


class LateBoundRequestCounter:
    """A `RequestCounter` whose target (the runtime's metrics) exists only while the lifespan runs."""

    def __init__(self) -> None:
        self.target: RequestCounter | None = None

    def http_request(self, method: str, route: str, status: int) -> None:
        if self.target is not None:
            self.target.http_request(method, route, status)


def route_label(scope: Scope) -> str:
    """The matched route's template (`/pay/{elicitation_id}`), never the raw path."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) and path else OTHER_ROUTE


@dataclass
class LogContext:
    request_id: str | None = None
    user_id: str | None = None
    elicitation_id: str | None = None
    parent: LogContext | None = None
    # Fields for the request's access line, noted by the work it carried (a tool call's outcome).
    notes: dict[str, Any] = field(default_factory=dict)
    http_request: bool = False  # made by the middleware below, which writes an access line for it
    logged: bool = False  # the access line is written: notes made now would be lost
    # Of a tool call's time, what the paywall took (entitlement checks, waiting for a payment).
    paywall_seconds: float = 0.0

    def bind(self, *, user_id: str | None = None, elicitation_id: str | None = None) -> None:
        node: LogContext | None = self
        while node is not None:
            if user_id is not None:
                node.user_id = user_id
            if elicitation_id is not None:
                node.elicitation_id = elicitation_id
            node = node.parent

    def note(self, **fields: Any) -> bool:
        """Put `fields` on the access line of the request this context belongs to; False when there
        is none (work outside an HTTP request) or its line is already written."""
        request = self
        while request.parent is not None:
            request = request.parent
        if not request.http_request or request.logged:
            return False
        # The access line is written from another thread: lists go on it as tuples, frozen now.
        request.notes.update(
            {key: tuple(value) if isinstance(value, list) else value for key, value in fields.items()}
        )
        return True

    def fields(self) -> dict[str, str]:
        values = {
            "request_id": self.request_id,
            "user_id": self.user_id,
            "elicitation_id": self.elicitation_id,
        }
        return {key: value for key, value in values.items() if value is not None}


_current: ContextVar[LogContext | None] = ContextVar("service_log_context", default=None)


def current() -> LogContext | None:
    return _current.get()


def note(**fields: Any) -> bool:
    """`LogContext.note` on the current context; False outside an HTTP request."""
    context = _current.get()
    return context is not None and context.note(**fields)


def spent_in_paywall(seconds: float) -> None:
    """Add to the current tool call's paywall time, which its execution-time metric leaves out."""
    context = _current.get()
    if context is not None:
        context.paywall_seconds += seconds


def bind(*, user_id: str | None = None, elicitation_id: str | None = None) -> None:
    """Attach what is now known to the current request (and the tool call inside it, if any)."""
    context = _current.get()
    if context is None:
        context = LogContext()
        _current.set(context)
    context.bind(user_id=user_id, elicitation_id=elicitation_id)


def enter_child() -> tuple[LogContext, Token[LogContext | None]]:
    """A context for one unit of work inside the current one, binds reaching both; `leave` ends it."""
    parent = _current.get()
    if parent is None:
        context = LogContext(request_id=new_request_id())
    else:
        context = LogContext(request_id=parent.request_id, user_id=parent.user_id, parent=parent)
    return context, _current.set(context)


def leave(token: Token[LogContext | None]) -> None:
    _current.reset(token)


def new_request_id() -> str:
    # 128 random bits in uuid4's hex form. An id has to be unique, not unguessable, so it comes
    # from `random` (re-seeded in forked children) rather than a getrandom() system call per request.
    return f"{random.getrandbits(128):032x}"


def accepted_request_id(value: str | None) -> str | None:
    """The caller's request id if it is safe to log and echo: no spaces, quotes, newlines or secrets."""
    if value is not None and _VALID_REQUEST_ID.fullmatch(value) and scrub(value) == value:
        return value
    return None


class RequestContextMiddleware:
    """Assigns or propagates `X-Request-ID`, binds the log context, writes one access line per request.

    The access line carries the path without its query string: query strings hold OAuth codes
    and Checkout session ids; the route is the template the app matched. With a `tracer`, each
    request is a server span (continuing the caller's `traceparent`), current while it runs.
    """

    def __init__(
        self,
        app: ASGIApp,
        requests: RequestCounter | None = None,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.app = app
        self.requests = requests
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.tracer is None:
            await self._serve(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in _TRACE_HEADERS
        }
        with self.tracer.start_as_current_span(
            scope.get("method", ""), context=propagate.extract(carrier), kind=trace.SpanKind.SERVER
        ):
            await self._serve(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        incoming = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-request-id"), None)
        request_id = accepted_request_id(incoming) or new_request_id()
        context = LogContext(request_id=request_id, http_request=True)
        token = _current.set(context)
        started = time.perf_counter()
        status = 500
        complete = False
        client_gone = False

        async def receive_noting_disconnect() -> Message:
            nonlocal client_gone
            message = await receive()
            if message["type"] == "http.disconnect":
                client_gone = True
            return message

        async def send_with_request_id(message: Message) -> None:
            nonlocal status, complete
            if message["type"] == "http.response.body":
                complete = not client_gone and not message.get("more_body", False)
            elif message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = _with_request_id(message.get("headers", ()), request_id)
                # Routes such as /pay/{elicitation_id} name the elicitation in the path.
                elicitation_id = scope.get("path_params", {}).get("elicitation_id")
                if isinstance(elicitation_id, str) and len(elicitation_id) <= 64:
                    context.bind(elicitation_id=elicitation_id)
            await send(message)

        try:
            await self.app(scope, receive_noting_disconnect, send_with_request_id)
        finally:
            if (client_gone and not complete) or context.notes.get("outcome") == CANCELLED:
                status = CLIENT_CLOSED_REQUEST
            context.logged = True
            method, route = scope.get("method", ""), route_label(scope)
            if self.requests is not None:
                self.requests.http_request(method, route, status)
            span_ids: dict[str, str] = {}
            if self.tracer is not None:
                span = trace.get_current_span()
                describe_request(span, method, route, status)
                span_ids = trace_ids(span)
            path = scope.get("path", "")
            level = logging.DEBUG if path in QUIET_PATHS else logging.INFO
            if access_logger.isEnabledFor(level):  # the line's fields cost more than the check
                notes = context.notes
                emit(
                    access_logger,
                    level,
                    "%s %s %s%s",
                    (
                        method,
                        path,
                        status,
                        f" tool {notes['tool']}: {notes['outcome']}" if "tool" in notes else "",
                    ),
                    {
                        "request_id": request_id,
                        "user_id": context.user_id,
                        "elicitation_id": context.elicitation_id,
                        "http_method": method,
                        "http_path": path,
                        "http_status": status,
                        "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                        **span_ids,
                        **notes,
                    },
                )
            _current.reset(token)


def trace_ids(span: trace.Span) -> dict[str, str]:
    """`trace_id` and `span_id` of a valid span, as log lines carry them; {} otherwise."""
    context = span.get_span_context()
    if not context.is_valid:
        return {}
    return {
        "trace_id": trace.format_trace_id(context.trace_id),
        "span_id": trace.format_span_id(context.span_id),
    }


def _with_request_id(headers: Iterable[tuple[bytes, bytes]], request_id: str) -> list[tuple[bytes, bytes]]:
    """The response's raw headers with ours as the one `x-request-id` (names arrive lower-case)."""
    kept = [(name, value) for name, value in headers if name.lower() != _REQUEST_ID_HEADER_BYTES]
    kept.append((_REQUEST_ID_HEADER_BYTES, request_id.encode("latin-1")))
    return kept
