"""Property: whatever JSON-RPC a signed-in caller posts to `/mcp`, in either protocol era, the answer
arrives, is never a server error (HTTP 5xx, or JSON-RPC -32603 from an exception in a handler), a
refusal says what was wrong, and nothing is logged as an error.

The methods come from the SDK's own tables (`mcp_types.methods`: every client request and
notification of 2025-11-25 and 2026-07-28); each message starts from params generated from that
method's JSON Schema, and `tools/call` from the served tools' own input schemas (as listed by
`tools/list`), so most examples get past validation to the handlers, the paywall and the tools.
Then some are broken: a subtree replaced by junk, a key dropped, the id or the method changed.
Two callers: one with the Team plan (paid tools run) and one without (the paywall answers).

2025-11-25: each example opens a session (initialize, notifications/initialized), posts its
message (alone, in a batch, or as a response to nothing) with the session's headers, some of them
broken, and closes the session. 2026-07-28: one sessionless POST with the era's headers
(`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) and `_meta` (bench/wire.py).

Deterministic (`derandomize=True`); `FUZZ_EXAMPLES=N` and `FUZZ_RANDOM=1` search harder by hand.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp_types.methods import CLIENT_NOTIFICATIONS, CLIENT_REQUESTS

from tests.support.databases import DatabaseTemplates
from tests.support.factories import subscription
from tests.support.fuzz import (
    QUIET_ABOUT_RANDOM,
    Answer,
    ErrorLog,
    RawRequest,
    ServerRequest,
    ThreadedService,
    error_log,
    fuzz_settings,
    json_rpc_messages,
    send,
    send_and_check,
)

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
ACCEPT = b"application/json, text/event-stream"
pytestmark = QUIET_ABOUT_RANDOM


@dataclass(frozen=True)
class Caller:
    name: str
    token: str

    def __repr__(self) -> str:
        return f"Caller({self.name})"


@dataclass(frozen=True)
class Fuzzed:
    running: ThreadedService
    errors: ErrorLog
    callers: list[Caller]
    tools: dict[str, dict[str, Any]]  # name -> inputSchema, as tools/list serves them


@pytest.fixture(scope="module")
def fuzzed(db_templates: DatabaseTemplates, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    url = db_templates.fresh_url(tmp_path_factory.mktemp("fuzz-mcp"))
    # Payments no example makes are not waited for. A 2025-11-25 call is asked to pay with an
    # `elicitation/create` the examples answer, rather than a -32042 error.
    waits = {"retry_wait_seconds": 0, "payment_wait_seconds": 0.05, "elicitation_style": "request"}
    with error_log() as errors, ThreadedService(url, **waits) as running:
        service = running.service
        callers = []
        for name, plan in (("paying", "team"), ("unpaid", None)):
            user = running.run(service.add_user(name))
            if plan:
                running.run(subscription(service, user, plan_id=plan))
            callers.append(Caller(name, running.run(service.personal_token(name)).secret))
        listed = send(running.port, modern_post(callers[0], message("tools/list", 1, modern_params({}))))
        [result] = json_rpc_messages(listed)
        tools = {tool["name"]: tool["inputSchema"] for tool in result["result"]["tools"]}
        assert {"text_stats", "ascii_chart", "sql_explain", "password_audit", "whoami"} <= tools.keys()
        errors.take()
        yield Fuzzed(running, errors, callers, tools)


# --- JSON from JSON Schema, and junk ---------------------------------------------------------

JUNK_STRINGS = [
    "",
    "\x00",
    "é",
    "\ud800",
    "a" * 3000,
    "../../etc/passwd",
    "el_x",
    "${x}",
    "%s",
    "\u202e",
    "9" * 400,
    "null",
    "SELECT 1; DROP TABLE x",
    "text_stats",
    "tools/call",
]


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
        st.sampled_from(JUNK_STRINGS),
        st.integers(min_value=10**30, max_value=10**60),
    )


def json_values() -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
        ),
        max_leaves=10,
    )


MAX_SCHEMA_DEPTH = 6
_BUILT: dict[str, st.SearchStrategy[Any]] = {}


def valid_for(schema: Any) -> st.SearchStrategy[Any]:
    """`from_schema`, built once per schema (building one for a large schema costs more than
    drawing from it)."""
    key = json.dumps(schema, sort_keys=True)
    if key not in _BUILT:
        _BUILT[key] = from_schema(schema, {})
    return _BUILT[key]


def from_schema(schema: Any, defs: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values valid (mostly) for a JSON Schema of the kinds pydantic and the SDK write: objects
    with their required keys and some optional ones, `$ref`, `anyOf`, `const`, `enum`, bounds."""
    if not isinstance(schema, dict) or depth > MAX_SCHEMA_DEPTH:
        return json_values()
    defs = {**defs, **schema.get("$defs", {})}
    if "$ref" in schema:
        target = defs.get(schema["$ref"].rsplit("/", 1)[-1], {})
        return st.deferred(lambda: from_schema(target, defs, depth + 1))
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for combinator in ("anyOf", "oneOf"):
        if combinator in schema:
            return st.one_of([from_schema(option, defs, depth + 1) for option in schema[combinator]])
    if schema.get("allOf"):
        return from_schema(schema["allOf"][0], defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": one}, defs, depth) for one in kind])
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        required = [key for key in schema.get("required", []) if key in properties]
        return st.fixed_dictionaries(
            {key: from_schema(properties[key], defs, depth + 1) for key in required},
            optional={
                key: from_schema(value, defs, depth + 1)
                for key, value in properties.items()
                if key not in required
            },
        )
    if kind == "array":
        low, high = schema.get("minItems", 0), min(schema.get("maxItems", 4), 6)
        return st.lists(
            from_schema(schema.get("items", {}), defs, depth + 1), min_size=low, max_size=max(low, high)
        )
    if kind == "string":
        low = schema.get("minLength", 0)
        high = min(schema.get("maxLength", 40), 200)
        return st.one_of(st.text(min_size=low, max_size=max(low, high)), st.sampled_from(JUNK_STRINGS))
    if kind == "integer":
        return st.integers(schema.get("minimum", -(10**6)), schema.get("maximum", 10**6))
    if kind == "number":
        return st.floats(schema.get("minimum", -1e9), schema.get("maximum", 1e9), allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return json_values()


@st.composite
def broken(draw: st.DrawFn, value: Any) -> Any:
    """`value` with one subtree replaced by junk, a key dropped, or a key added (or unchanged)."""
    action = draw(st.sampled_from(["keep", "keep", "replace", "drop", "add"]))
    if action == "keep":
        return value
    path: list[Any] = []
    node = value
    while isinstance(node, (dict, list)) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else range(len(node))))
        path.append(key)
        node = node[key]
    copy = json.loads(json.dumps(value))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    if not path:
        return draw(json_values()) if action == "replace" else copy
    last = path[-1]
    if action == "replace":
        parent[last] = draw(json_values())
    elif action == "drop" and isinstance(parent, dict):
        del parent[last]
    elif isinstance(parent, dict):
        parent[draw(st.text(max_size=12))] = draw(json_values())
    return copy


# --- messages --------------------------------------------------------------------------------


@functools.cache
def methods(era: str) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(requests, notifications) of `era`, each with its params' JSON Schema, from the SDK's maps."""

    def params_schema(model: Any) -> Any:
        schema = model.model_json_schema()
        params = schema.get("properties", {}).get("params", {})
        return {**params, "$defs": schema.get("$defs", {})}

    requests = [
        (method, params_schema(model))
        for (method, version), model in CLIENT_REQUESTS.items()
        if version == era
    ]
    notes = [
        (method, params_schema(model))
        for (method, version), model in CLIENT_NOTIFICATIONS.items()
        if version == era
    ]
    return sorted(requests, key=lambda item: item[0]), sorted(notes, key=lambda item: item[0])


def message(method: str, request_id: Any, params: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        body["id"] = request_id
    return body


def modern_params(params: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        **params,
        "_meta": meta
        if meta is not None
        else {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
        },
    }


IDS = st.one_of(st.integers(-(2**63), 2**63), st.text(max_size=20), st.just(1))
ODD_IDS = st.one_of(
    IDS,
    st.none(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.just([1]),
    st.just({"a": 1}),
    st.integers(2**64, 2**80),
)


@st.composite
def params_for(draw: st.DrawFn, fuzzed: Fuzzed, era: str, method: str, schema: Any) -> Any:
    if method == "tools/call":
        name = draw(st.one_of(st.sampled_from(sorted(fuzzed.tools)), st.sampled_from(JUNK_STRINGS)))
        arguments = draw(valid_for(fuzzed.tools.get(name, {})))
        params: Any = {"name": name, "arguments": arguments}
        if era == MODERN:
            params = modern_params(params)
            extra = draw(valid_for(schema))  # requestState, inputResponses, _meta fields
            for key in ("requestState", "inputResponses"):
                if key in extra and draw(st.booleans()):
                    params[key] = extra[key]
            if draw(st.booleans()):
                params["_meta"] = {**params["_meta"], **extra.get("_meta", {})}
    else:
        params = draw(valid_for(schema))
        if era == MODERN and isinstance(params, dict) and draw(st.integers(0, 3)):
            params = modern_params({k: v for k, v in params.items() if k != "_meta"})
    return draw(broken(params))


@st.composite
def rpc_bodies(draw: st.DrawFn, fuzzed: Fuzzed, era: str) -> Any:
    """A JSON-RPC body: mostly a request (half of them `tools/call`), or a notification, a response
    to nothing, a batch, any JSON."""
    requests, notifications = methods(era)
    shape = draw(st.sampled_from(["request"] * 6 + ["notification", "response", "batch", "junk"]))
    if shape == "junk":
        return draw(json_values())
    if shape == "response":
        outcome = draw(st.sampled_from(["result", "error"]))
        value = (
            draw(json_values())
            if outcome == "result"
            else {"code": draw(IDS), "message": draw(st.text(max_size=10))}
        )
        return draw(broken({"jsonrpc": "2.0", "id": draw(ODD_IDS), outcome: value}))
    if shape == "notification":
        method, schema = draw(st.sampled_from(notifications))
        return message(method, None, draw(params_for(fuzzed, era, method, schema)))
    tools_call = [entry for entry in requests if entry[0] == "tools/call"]
    method, schema = draw(st.sampled_from(tools_call) | st.sampled_from(requests))
    params = draw(params_for(fuzzed, era, method, schema))
    request_id = draw(st.one_of(IDS, IDS, IDS, ODD_IDS))
    body = draw(broken(message(method, request_id, params)))
    if shape == "batch":
        return [body, draw(broken(message("ping", 2, {})))]
    return body


def encode(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


def header_junk() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=30).map(lambda raw: raw.replace(b"\r", b"").replace(b"\n", b"")),
        st.sampled_from(
            [b"", b"2025-11-25", b"2026-07-28", b"2024-11-05", b"1999-01-01", b"\xff", b"a" * 4000]
        ),
    )


def modern_post(caller: Caller, body: Any, extra: list[tuple[bytes, bytes]] | None = None) -> RawRequest:
    method = body.get("method") if isinstance(body, dict) else None
    params = body.get("params") if isinstance(body, dict) else None
    name = params.get("name") if isinstance(params, dict) else None
    headers = [
        (b"Authorization", b"Bearer " + caller.token.encode()),
        (b"Content-Type", b"application/json"),
        (b"Accept", ACCEPT),
        (b"MCP-Protocol-Version", MODERN.encode()),
    ]
    if isinstance(method, str):
        headers.append((b"Mcp-Method", method.encode("utf-8", "surrogatepass")))
    if isinstance(name, str):
        headers.append((b"Mcp-Name", name.encode("utf-8", "surrogatepass")))
    return RawRequest(b"POST", b"/mcp", headers + (extra or []), encode(body))


@st.composite
def header_changes(draw: st.DrawFn, names: list[bytes]) -> list[tuple[bytes, bytes | None]]:
    """Headers to replace (with junk) or drop (None), mostly none."""
    return draw(
        st.lists(st.tuples(st.sampled_from(names), st.one_of(st.none(), header_junk())), max_size=2)
        | st.just([])
        | st.just([])
    )


def apply_changes(request: RawRequest, changes: list[tuple[bytes, bytes | None]]) -> RawRequest:
    headers = list(request.headers)
    for name, value in changes:
        headers = [(key, old) for key, old in headers if key.lower() != name.lower()]
        if value is not None:
            headers.append((name, value))
    return RawRequest(request.method, request.target, headers, request.body)


# --- the properties ----------------------------------------------------------------------------


# Answered with a stream of notifications that stays open: only its head is read.
STREAMING_METHODS = {"subscriptions/listen"}


def check(fuzzed: Fuzzed, request: RawRequest, asked: ServerRequest | None = None) -> Answer:
    stream = any(method.encode() in request.body for method in STREAMING_METHODS)
    return send_and_check(fuzzed.running.port, fuzzed.errors, request, stream=stream, asked=asked)


def test_no_2026_07_28_message_is_a_server_error(fuzzed: Fuzzed) -> None:
    changeable = [
        b"MCP-Protocol-Version",
        b"Mcp-Method",
        b"Mcp-Name",
        b"Content-Type",
        b"Accept",
        b"Mcp-Session-Id",
    ]

    @fuzz_settings(250)
    @given(st.sampled_from(fuzzed.callers), rpc_bodies(fuzzed, MODERN), header_changes(changeable))
    def property(caller: Caller, body: Any, changes: Any) -> None:
        check(fuzzed, apply_changes(modern_post(caller, body), changes))

    property()


def legacy_headers(caller: Caller, session_id: bytes | None) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"Authorization", b"Bearer " + caller.token.encode()),
        (b"Content-Type", b"application/json"),
        (b"Accept", ACCEPT),
    ]
    if session_id is not None:
        headers += [(b"Mcp-Session-Id", session_id), (b"MCP-Protocol-Version", LEGACY.encode())]
    return headers


INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": LEGACY,
        "capabilities": {"elicitation": {"form": {}, "url": {}}},
        "clientInfo": {"name": "fuzz", "version": "0"},
    },
}


CAPABILITIES: list[dict[str, Any]] = [
    {"elicitation": {"form": {}, "url": {}}},
    {"elicitation": {"form": {}}},
    {},
]


def open_session(fuzzed: Fuzzed, caller: Caller, capabilities: dict[str, Any]) -> bytes:
    initialize = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": capabilities}}
    opened = check(fuzzed, RawRequest(b"POST", b"/mcp", legacy_headers(caller, None), encode(initialize)))
    session = opened.header("mcp-session-id")
    assert opened.status == 200 and session, opened
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    acked = check(
        fuzzed, RawRequest(b"POST", b"/mcp", legacy_headers(caller, session.encode()), encode(ready))
    )
    assert acked.status == 202, acked
    return session.encode()


ELICIT_RESULT = {"action": "accept", "content": {}}


@st.composite
def answers_to(draw: st.DrawFn, asked: dict[str, Any]) -> Any:
    """What a client posts back for the server's request: its result or an error, maybe broken."""
    outcome = draw(st.sampled_from(["result", "result", "error"]))
    action = draw(st.sampled_from(["accept", "decline", "cancel"]))
    value: Any = {**ELICIT_RESULT, "action": action} if outcome == "result" else {"code": -1, "message": "no"}
    return draw(broken({"jsonrpc": "2.0", "id": asked.get("id"), outcome: value}))


def test_no_2025_11_25_message_in_a_session_is_a_server_error(fuzzed: Fuzzed) -> None:
    """With the answers the server waits for: each request it sends on a call's stream (the
    paywall's or the billing portal's `elicitation/create`) gets a generated answer, then the right
    one (a `cancel`), so a call a broken answer leaves waiting still ends."""
    changeable = [b"MCP-Protocol-Version", b"Mcp-Session-Id", b"Content-Type", b"Accept", b"Last-Event-ID"]

    @fuzz_settings(150)
    @given(
        st.sampled_from(fuzzed.callers),
        st.sampled_from(CAPABILITIES),
        rpc_bodies(fuzzed, LEGACY),
        header_changes(changeable),
        st.sampled_from([b"POST", b"POST", b"POST", b"GET", b"DELETE"]),
        st.data(),
    )
    def property(
        caller: Caller,
        capabilities: dict[str, Any],
        body: Any,
        changes: Any,
        method: bytes,
        data: st.DataObject,
    ) -> None:
        session = open_session(fuzzed, caller, capabilities)

        def answer(asked: dict[str, Any]) -> None:
            for reply in (
                data.draw(answers_to(asked)),
                {"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "cancel"}},
            ):
                check(fuzzed, RawRequest(b"POST", b"/mcp", legacy_headers(caller, session), encode(reply)))

        try:
            request = RawRequest(method, b"/mcp", legacy_headers(caller, session), encode(body))
            check(fuzzed, apply_changes(request, changes), asked=answer)
        finally:
            check(fuzzed, RawRequest(b"DELETE", b"/mcp", legacy_headers(caller, session)))

    property()


def test_no_initialize_is_a_server_error(fuzzed: Fuzzed) -> None:
    """The first message of a session, broken once or twice: the SDK's handshake, the session
    cap's reading of it, and the session it may open (closed again)."""

    @fuzz_settings(100)
    @given(st.sampled_from(fuzzed.callers), broken(INITIALIZE).flatmap(broken))
    def property(caller: Caller, body: Any) -> None:
        answer = check(fuzzed, RawRequest(b"POST", b"/mcp", legacy_headers(caller, None), encode(body)))
        session = answer.header("mcp-session-id")
        if session:
            check(fuzzed, RawRequest(b"DELETE", b"/mcp", legacy_headers(caller, session.encode())))

    property()
