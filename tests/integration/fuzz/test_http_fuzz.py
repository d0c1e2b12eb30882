"""Property: whatever a stranger or a signed-in user sends to any route the app serves, the answer
arrives, is never a server error, a refusal says what was wrong, and nothing is logged as an error.

The routes come from the running app's own table (FastAPI's, the SDK's mounted at `/`, static
files); each example picks one, a method (its own or an odd one), raw bytes for its path
parameters, a query string, headers and a body, and sends them over a raw socket. The parameter
and field names the generator favours come from the app's OpenAPI document and the OAuth and
OpenID Connect names the SDK's and our handlers read.

Deterministic (`derandomize=True`): the same examples every run. `FUZZ_EXAMPLES=N` runs N per
test instead, and `FUZZ_RANDOM=1` draws new ones, to search harder by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, quote_from_bytes

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.identity.models import User
from tests.support.databases import DatabaseTemplates
from tests.support.factories import elicitation as factory_elicitation
from tests.support.fuzz import (
    QUIET_ABOUT_RANDOM,
    Credentials,
    ErrorLog,
    RawRequest,
    RouteInfo,
    ThreadedService,
    error_log,
    fill_template,
    fuzz_settings,
    parameter_count,
    route_table,
    send_and_check,
    sign_in,
)
from tests.support.oauth import REDIRECT_URI, authorize, pkce_pair, query_of, register

pytestmark = QUIET_ABOUT_RANDOM


@pytest.fixture(scope="module")
def fuzzed(
    db_templates: DatabaseTemplates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ThreadedService, Credentials, ErrorLog]]:
    url = db_templates.fresh_url(tmp_path_factory.mktemp("fuzz-http"))
    with error_log() as errors, ThreadedService(url) as running:
        credentials = sign_in(running, "fuzzer")
        errors.take()  # only what the examples cause
        yield running, credentials, errors


# --- what the generator knows about the app ----------------------------------------------------

OAUTH_NAMES = [
    # RFC 6749, 7009, 7591, 7636, 8707 and OpenID Connect: what /authorize, /token, /revoke,
    # /register and /oidc/callback read from a request.
    "response_type",
    "client_id",
    "client_secret",
    "redirect_uri",
    "scope",
    "state",
    "code",
    "code_challenge",
    "code_challenge_method",
    "code_verifier",
    "resource",
    "grant_type",
    "refresh_token",
    "token",
    "token_type_hint",
    "error",
    "error_description",
    "iss",
    "redirect_uris",
    "client_name",
    "token_endpoint_auth_method",
    "grant_types",
    "response_types",
]


def openapi_names(document: dict[str, Any]) -> list[str]:
    """Every query parameter and form field the app's OpenAPI document names."""
    names: set[str] = set()
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            names.update(parameter["name"] for parameter in operation.get("parameters", []))
    for schema in document.get("components", {}).get("schemas", {}).values():
        names.update(schema.get("properties", {}))
    return sorted(names)


ODD_METHODS = [
    b"GET",
    b"POST",
    b"PUT",
    b"DELETE",
    b"PATCH",
    b"OPTIONS",
    b"HEAD",
    b"TRACE",
    b"get",
    b"FOO",
    b"M" * 200,
    b"PROPFIND",
]

JUNK_TEXT = st.sampled_from(
    [
        "",
        "\x00",
        "%",
        "%zz",
        "%ff%fe",
        "%00",
        "%C0%AF",
        "..",
        "/",
        "é",
        "\u2028",
        "\ud800".encode("utf-8", "surrogatepass").decode("latin-1"),
        "a" * 5000,
        "el_" + "a" * 300,
        "null",
        "[]",
        "{}",
        "-1",
        "1e999",
        "9" * 400,
        "true",
        " ",
        "\t",
        "\\",
        "'",
        '"',
        "<script>",
    ]
)


def raw_component() -> st.SearchStrategy[bytes]:
    """A path segment or query value as sent: percent-encoded text or bytes (invalid UTF-8
    included), raw non-ASCII bytes, and known troublemakers."""
    return st.one_of(
        st.text(max_size=30).map(lambda text: quote(text, safe="").encode()),
        st.binary(max_size=30).map(lambda raw: quote_from_bytes(raw, safe="").encode()),
        st.binary(max_size=20).map(lambda raw: bytes(b for b in raw if b > 0x20 and b not in b"/?#%\x7f")),
        JUNK_TEXT.map(lambda text: text.encode("utf-8", "surrogatepass")),
        st.integers(1, 60_000).map(lambda size: b"el_" + b"a" * size),
    )


def query_string(names: list[str]) -> st.SearchStrategy[bytes]:
    key = st.one_of(st.sampled_from(names).map(str.encode), raw_component())
    pair = st.tuples(key, raw_component()).map(lambda kv: kv[0] + b"=" + kv[1])
    bare = raw_component()
    return st.lists(st.one_of(pair, pair, bare), max_size=8).map(b"&".join)


def header_value() -> st.SearchStrategy[bytes]:
    """Header bytes a socket can carry: anything but CR and LF (which would end the header)."""
    return st.one_of(
        st.binary(max_size=60).map(lambda raw: raw.replace(b"\r", b"").replace(b"\n", b"")),
        JUNK_TEXT.map(lambda text: text.encode("utf-8", "surrogatepass")),
        st.text(max_size=40).map(lambda text: text.encode("utf-8", "surrogatepass")),
        st.just(b"a" * 8000),
    )


def headers(credentials: Credentials) -> st.SearchStrategy[list[tuple[bytes, bytes]]]:
    token = credentials.token.encode()
    cookie = credentials.cookie_header.encode()
    authorization = st.one_of(
        header_value(),
        header_value().map(lambda junk: b"Bearer " + junk),
        header_value().map(lambda junk: b"Basic " + junk),
        st.binary(max_size=40).map(lambda raw: b"Basic " + __import__("base64").b64encode(raw)),
        st.sampled_from(
            [
                b"Bearer " + token,
                b"bearer " + token,
                b"Bearer  " + token,
                b"Bearer " + token + b"\x00",
                b"Bearer " + token + b"\xff",
                b"Bearer " + token[:-1],
            ]
        ),
    )
    cookies = st.one_of(
        header_value(),
        st.just(cookie),
        header_value().map(lambda junk: b"session=" + junk + b"; csrf=" + junk),
        header_value().map(lambda junk: cookie + b"; " + junk),
        header_value().map(lambda junk: b"csrf=" + junk + b"; " + cookie.split(b"; ")[0]),
    )
    content_type = st.one_of(
        header_value(),
        st.sampled_from(
            [
                b"application/json",
                b"application/x-www-form-urlencoded",
                b"multipart/form-data",
                b"multipart/form-data; boundary=",
                b"multipart/form-data; boundary=x",
                b"text/plain",
                b"application/x-www-form-urlencoded; charset=utf-16",
                b"application/json; charset=latin-1",
                b"application/json\x00",
            ]
        ),
    )
    named = st.one_of(
        st.tuples(st.just(b"Authorization"), authorization),
        st.tuples(st.just(b"Cookie"), cookies),
        st.tuples(st.just(b"Content-Type"), content_type),
        st.tuples(
            st.sampled_from(
                [
                    b"Origin",
                    b"X-Forwarded-For",
                    b"Mcp-Session-Id",
                    b"MCP-Protocol-Version",
                    b"Accept",
                    b"Mcp-Method",
                    b"Mcp-Name",
                    b"Last-Event-ID",
                    b"X-Request-ID",
                    b"traceparent",
                    b"Stripe-Signature",
                    b"Content-Encoding",
                    b"Accept-Encoding",
                    b"Referer",
                    b"Range",
                    b"If-None-Match",
                    b"If-Modified-Since",
                    b"Accept-Language",
                    b"User-Agent",
                ]
            ),
            header_value(),
        ),
    )
    return st.lists(named, max_size=6)


def json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=20),
        JUNK_TEXT,
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
        ),
        max_leaves=12,
    )


def bodies(names: list[str], credentials: Credentials) -> st.SearchStrategy[bytes]:
    field_value = st.one_of(raw_component(), st.just(credentials.csrf_token.encode()))
    form = st.lists(
        st.tuples(st.sampled_from(names).map(str.encode), field_value).map(lambda kv: kv[0] + b"=" + kv[1]),
        max_size=8,
    ).map(b"&".join)
    json_object = st.dictionaries(st.sampled_from(names), json_values(), max_size=6).map(
        lambda value: json.dumps(value).encode()
    )
    return st.one_of(
        st.just(b""),
        form,
        json_object,
        json_values().map(lambda value: json.dumps(value).encode()),
        st.binary(max_size=200),
        st.integers(1, 20_000).map(lambda depth: b"[" * depth + b"]" * depth),
        st.integers(1, 20_000).map(lambda depth: b'{"a":' * depth + b"1" + b"}" * depth),
        st.sampled_from(
            [
                b"1" + b"0" * 5000,
                b"1e999999",
                b"NaN",
                b"-Infinity",
                b'{"a":1,"a":2}',
                b"\xff\xfe{",
                b'"\\ud800"',
                b'--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n\xff\r\n--x--\r\n',
            ]
        ),
        st.integers(1, 200_000).map(lambda size: b"a=" + b"b" * size),
    )


def target_for(route: RouteInfo, values: list[bytes], query: bytes) -> bytes:
    path = fill_template(route.template, values)
    return path + (b"?" + query if query else b"")


@st.composite
def requests(
    draw: st.DrawFn, routes: list[RouteInfo], names: list[str], credentials: Credentials
) -> RawRequest:
    route = draw(st.sampled_from(routes))
    own = sorted(method.encode() for method in route.methods) or [b"GET", b"POST", b"DELETE"]
    method = draw(st.one_of(st.sampled_from(own), st.sampled_from(own), st.sampled_from(ODD_METHODS)))
    values = [draw(raw_component()) for _ in range(parameter_count(route.template))]
    query = draw(st.one_of(st.just(b""), query_string(names)))
    body = draw(bodies(names, credentials)) if method not in (b"GET", b"HEAD") or draw(st.booleans()) else b""
    return RawRequest(method, target_for(route, values, query), draw(headers(credentials)), body)


@st.composite
def junk_paths(draw: st.DrawFn) -> RawRequest:
    """A request line the route table does not describe: any path, any method."""
    segments = draw(st.lists(raw_component(), min_size=0, max_size=5))
    prefix = draw(
        st.sampled_from([b"/", b"//", b"/pay/", b"/static/", b"/.well-known/", b"/mcp/", b"/webhooks/"])
    )
    method = draw(st.sampled_from(ODD_METHODS))
    return RawRequest(method, prefix + b"/".join(segments), [], b"")


# --- the properties ----------------------------------------------------------------------------


def vocabulary(running: ThreadedService) -> list[str]:
    document = running.service.app.openapi()
    return sorted(set(openapi_names(document)) | set(OAUTH_NAMES))


def test_the_route_table_is_read_from_the_app(fuzzed: tuple[ThreadedService, Credentials, ErrorLog]) -> None:
    """The generator covers what the app serves, including the SDK's routes mounted at `/`."""
    running, _, _ = fuzzed
    templates = {route.template for route in route_table(running.service.app)}
    expected = {"/mcp", "/webhooks/stripe", "/login", "/token", "/register", "/authorize", "/revoke"}
    assert expected | {"/pay/{elicitation_id}", "/.well-known/oauth-protected-resource/mcp"} <= templates


def test_no_request_to_any_route_is_a_server_error(
    fuzzed: tuple[ThreadedService, Credentials, ErrorLog],
) -> None:
    running, credentials, errors = fuzzed
    routes = route_table(running.service.app)
    names = vocabulary(running)

    @fuzz_settings(400)
    @given(requests(routes, names, credentials))
    def property(request: RawRequest) -> None:
        send_and_check(running.port, errors, request)

    property()


def test_no_request_line_off_the_route_table_is_a_server_error(
    fuzzed: tuple[ThreadedService, Credentials, ErrorLog],
) -> None:
    running, _, errors = fuzzed

    @fuzz_settings(100)
    @given(junk_paths())
    def property(request: RawRequest) -> None:
        send_and_check(running.port, errors, request)

    property()


# --- deeper: the forms and OAuth steps with real ids ---------------------------------------------


@dataclass(frozen=True)
class RealIds:
    """What a signed-in user really holds, so examples get past "not found" to the handlers."""

    elicitation_id: str
    client_id: str
    authz: str
    plan_ids: list[str]
    pack_ids: list[str]


def real_ids(running: ThreadedService, credentials: Credentials) -> RealIds:
    service = running.service
    [user] = running.run(service.rows(User, id=credentials.user_id))
    elicitation = running.run(factory_elicitation(service, user))

    async def oauth_client() -> tuple[str, str]:
        async with service.http() as http:
            client = await register(http)
            to_login = await authorize(service, http, client["client_id"], pkce_pair()[1])
            return client["client_id"], query_of(to_login.headers["location"])["authz"]

    client_id, authz = running.run(oauth_client())
    catalog = service.runtime.catalog
    return RealIds(
        elicitation.id,
        client_id,
        authz,
        [plan.id for plan in catalog.all()],
        [pack.id for pack in catalog.credit_packs()],
    )


def form(fields: dict[str, st.SearchStrategy[bytes]]) -> st.SearchStrategy[bytes]:
    """A form-encoded body with some of `fields` (each valid or junk) and maybe a stray one."""
    pairs = [st.tuples(st.just(name.encode()), value) for name, value in fields.items()]
    chosen = st.lists(st.one_of(pairs), max_size=len(fields) + 1) if pairs else st.just([])
    stray = st.lists(st.tuples(raw_component(), raw_component()), max_size=1)
    return st.tuples(chosen, stray).map(
        lambda both: b"&".join(key + b"=" + value for key, value in both[0] + both[1])
    )


def either(valid: list[str]) -> st.SearchStrategy[bytes]:
    return st.one_of(st.sampled_from(valid).map(lambda text: quote(text, safe="").encode()), raw_component())


@st.composite
def deep_requests(draw: st.DrawFn, ids: RealIds, credentials: Credentials) -> RawRequest:
    csrf = either([credentials.csrf_token])
    el = ids.elicitation_id.encode()
    pay = b"/pay/" + draw(st.sampled_from([el, el + b"%00", el.upper(), el + b"x"]))
    authz = either([ids.authz, ids.authz[:-3], ids.authz + "A"])
    client = either([ids.client_id])
    choices: list[tuple[bytes, bytes, dict[str, st.SearchStrategy[bytes]]]] = [
        (b"POST", pay, {"csrf_token": csrf, "plan_id": either(ids.plan_ids)}),
        (b"POST", pay + b"/credits", {"csrf_token": csrf, "pack_id": either(ids.pack_ids)}),
        (b"POST", pay + b"/restart", {"csrf_token": csrf}),
        (b"GET", pay, {}),
        (b"GET", pay + b"/success", {}),
        (b"GET", pay + b"/cancel", {}),
        (b"POST", b"/billing", {"csrf_token": csrf}),
        (
            b"POST",
            b"/authorize/consent",
            {"authz": authz, "decision": either(["allow", "deny"]), "csrf_token": csrf},
        ),
        (
            b"POST",
            b"/login",
            {
                "authz": authz,
                "username": either(["fuzzer"]),
                "password": raw_component(),
                "csrf_token": csrf,
                "next": either(["/account", "//evil", "/pay/x"]),
            },
        ),
        (
            b"POST",
            b"/token",
            {
                "grant_type": either(["authorization_code", "refresh_token", "client_credentials"]),
                "client_id": client,
                "code": raw_component(),
                "code_verifier": raw_component(),
                "redirect_uri": either([REDIRECT_URI]),
                "refresh_token": raw_component(),
                "client_secret": raw_component(),
                "resource": raw_component(),
            },
        ),
        (
            b"POST",
            b"/revoke",
            {"token": raw_component(), "client_id": client, "token_type_hint": raw_component()},
        ),
        (
            b"POST",
            b"/authorize",
            {
                "response_type": either(["code"]),
                "client_id": client,
                "redirect_uri": either([REDIRECT_URI]),
                "code_challenge": raw_component(),
                "code_challenge_method": either(["S256", "plain"]),
                "state": raw_component(),
                "scope": raw_component(),
                "resource": raw_component(),
            },
        ),
    ]
    method, path, fields = draw(st.sampled_from(choices))
    body = draw(form(fields))
    headers = [(b"Cookie", credentials.cookie_header.encode())]
    if method == b"GET" or (path in (b"/authorize",) and draw(st.booleans())):
        query = draw(form({**fields, "authz": authz, "next": raw_component()}))
        return RawRequest(b"GET", path + (b"?" + query if query else b""), headers, b"")
    headers.append((b"Content-Type", b"application/x-www-form-urlencoded"))
    return RawRequest(method, path, headers, body)


@st.composite
def registrations(draw: st.DrawFn) -> RawRequest:
    """Client metadata with each field valid, of a wrong type, or missing."""
    metadata = {
        "client_name": "fuzz",
        "redirect_uris": [REDIRECT_URI],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "scope": "a b",
        "contacts": ["a@example.com"],
        "client_uri": "https://example.com",
        "jwks": {"keys": []},
    }
    for key in sorted(metadata):
        change = draw(st.sampled_from(["keep", "keep", "keep", "drop", "junk"]))
        if change == "drop":
            del metadata[key]
        elif change == "junk":
            metadata[key] = draw(json_values())
    body = json.dumps(metadata).encode()
    return RawRequest(b"POST", b"/register", [(b"Content-Type", b"application/json")], body)


def test_no_form_or_oauth_step_with_real_ids_is_a_server_error(
    fuzzed: tuple[ThreadedService, Credentials, ErrorLog],
) -> None:
    """The signed-in user's own payment page, the consent of a real pending authorization, token
    and revocation requests of a registered client, and registrations, with each field valid or not."""
    running, credentials, errors = fuzzed
    ids = real_ids(running, credentials)
    errors.take()

    @fuzz_settings(250)
    @given(st.one_of(deep_requests(ids, credentials), deep_requests(ids, credentials), registrations()))
    def property(request: RawRequest) -> None:
        send_and_check(running.port, errors, request)

    property()
