"""The built-in OAuth server on the open internet: consent, registration limits, single use,
hashed client secrets, honest metadata, revocation across replicas."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from service.audit.models import AuditEvent
from service.audit.service import AuditKind
from service.db.metadata import utcnow
from service.identity.models import AuthorizationCode, OAuthClient, Token
from service.paywall.pg_bus import PostgresBus
from tests.support.browserless import decide_consent, log_in_through_form
from tests.support.databases import DatabaseTemplates
from tests.support.oauth import (
    UNDECODABLE_FORM,
    UNDECODABLE_MULTIPART,
    authorize,
    authorized_tokens,
    client_metadata,
    exchange_code,
    pkce_pair,
    query_of,
    refresh_with,
    refused_within_deadline,
    register,
    signed_in_code,
    whoami_status,
)
from tests.support.servers import bound_socket, port_of
from tests.support.service import DEFAULT_PASSWORD, RunningService, make_settings, run_service, run_service_on

EVIL_REDIRECT = "https://evil.test/cb"
MINUTE = timedelta(minutes=1)


async def test_sign_in_leads_to_a_consent_page_naming_the_redirect_host(service: RunningService) -> None:
    await service.add_user("victim")
    _, challenge = pkce_pair()
    async with service.http() as browser:
        client = await register(browser, client_name="Claude Desktop", redirect_uris=[EVIL_REDIRECT])
        to_login = await authorize(
            service, browser, client["client_id"], challenge, redirect_uri=EVIL_REDIRECT
        )
        signed_in = await log_in_through_form(
            browser, to_login.headers["location"], "victim", DEFAULT_PASSWORD
        )
        assert signed_in.status_code == 303
        assert not signed_in.headers["location"].startswith(EVIL_REDIRECT)
        assert await service.rows(AuthorizationCode) == []  # no code before consent

        page = await browser.get(signed_in.headers["location"])
        assert page.status_code == 200
        assert "Claude Desktop" in page.text
        assert "unverified" in page.text
        assert 'id="redirect-host">evil.test<' in page.text
        assert "call the tools" in page.text
        assert await service.rows(AuthorizationCode) == []

        # Back at /authorize while signed in: the consent page again, not a code.
        again = await authorize(service, browser, client["client_id"], challenge, redirect_uri=EVIL_REDIRECT)
        login_page = await browser.get(again.headers["location"])
        assert login_page.status_code == 303
        assert login_page.headers["location"].startswith("/authorize/consent?")
        assert await service.rows(AuthorizationCode) == []

        denied = await decide_consent(browser, login_page.headers["location"], "deny")
        assert denied.headers["location"].startswith(EVIL_REDIRECT)
        assert query_of(denied.headers["location"])["error"] == "access_denied"
        assert await service.rows(AuthorizationCode) == []

        allowed = await decide_consent(browser, signed_in.headers["location"], "allow")
        assert allowed.headers["location"].startswith(EVIL_REDIRECT)
        assert "code" in query_of(allowed.headers["location"])

        # Approval is remembered for this client and redirect URI: the next sign-in goes straight through.
        later = await authorize(service, browser, client["client_id"], challenge, redirect_uri=EVIL_REDIRECT)
        consent = await browser.get((await browser.get(later.headers["location"])).headers["location"])
        assert consent.status_code == 303
        assert "code" in query_of(consent.headers["location"])


@pytest.mark.parametrize(
    "redirect_uri",
    [
        "javascript:alert(1)",
        "javascript://evil.test/%0aalert(1)",
        "data:text/html,<script>alert(1)</script>",
        "ftp://evil.test/cb",
        "http://evil.test/cb",
        "https://good.test/cb#fragment",
        "https://good.test@evil.test/cb",
    ],
)
async def test_registration_refuses_unsafe_redirect_uris(service: RunningService, redirect_uri: str) -> None:
    async with service.http() as http:
        response = await http.post(
            "/register", json=client_metadata(redirect_uris=["https://good.test/cb", redirect_uri])
        )
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "invalid_redirect_uri"
    assert await service.rows(OAuthClient) == []


async def test_registration_accepts_https_and_loopback_http(service: RunningService) -> None:
    uris = [
        "https://app.example/cb",
        "http://127.0.0.1:8123/cb",
        "http://[::1]:8123/cb",
        "http://localhost:8/cb",
    ]
    async with service.http() as http:
        await register(http, redirect_uris=uris)


async def test_registration_and_token_answers_are_never_stored(service: RunningService) -> None:
    """Both carry secrets (a client secret, tokens): RFC 7591 §3.2.1 and RFC 6749 §5.1."""
    async with service.http() as http:
        registered = await http.post(
            "/register", json=client_metadata(token_endpoint_auth_method="client_secret_post")
        )
        refused = await http.post("/register", json={"redirect_uris": ["ftp://a.example/cb"]})
        token = await http.post("/token", data={"client_id": registered.json()["client_id"]})
    assert registered.status_code == 201 and "client_secret" in registered.json()
    assert refused.status_code == 400
    assert token.status_code == 401  # no secret sent
    for answer in (registered, refused, token):
        assert answer.headers["cache-control"] == "no-store"


async def test_registration_is_rate_limited_per_address(database_url: str) -> None:
    async with run_service(database_url, oauth_registrations_per_address_per_hour=3) as service:
        async with service.http() as http:
            for _ in range(3):
                await register(http)
            refused = await http.post("/register", json=client_metadata())
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) > 0
        assert len(await service.rows(OAuthClient)) == 3


async def test_registration_limit_keys_ipv6_clients_by_their_64(database_url: str) -> None:
    settings = {"oauth_registrations_per_address_per_hour": 3, "trusted_proxies": ["127.0.0.1"]}
    async with run_service(database_url, **settings) as service:
        async with service.http() as http:
            answers = [
                await http.post(
                    "/register",
                    json=client_metadata(),
                    headers={"X-Forwarded-For": f"2001:db8:1:2::{n + 1:x}"},
                )
                for n in range(4)
            ]
            neighbour = await http.post(
                "/register", json=client_metadata(), headers={"X-Forwarded-For": "2001:db8:1:3::1"}
            )
        assert [answer.status_code for answer in answers] == [201, 201, 201, 429]
        assert neighbour.status_code == 201, "another /64 has its own allowance"


@pytest.mark.parametrize(
    "metadata",
    [
        {"client_name": "x" * 101},
        {"contacts": ["x" * 1000] * 20},
        {"contacts": [f"admin{n}@app.example" for n in range(6)]},
        {"contacts": ["x" * 321]},
        {"scope": "s " * 4000},
        {"software_id": "x" * 201},
        {"software_version": "x" * 201},
        {"client_uri": "https://app.example/" + "x" * 2000},
        {"grant_types": ["authorization_code", "refresh_token", "a", "b", "c", "d"]},
        {"jwks": {"keys": []}},
        {"jwks_uri": "https://app.example/jwks.json"},
        # Each URI within its bound, together past what one registration may store.
        {"redirect_uris": [f"https://app.example/{n}/" + "x" * 1900 for n in range(5)]},
    ],
    ids=lambda metadata: next(iter(metadata)),
)
async def test_registration_refuses_over_long_metadata(
    service: RunningService, metadata: dict[str, object]
) -> None:
    async with service.http() as http:
        response = await http.post("/register", json={**client_metadata(), **metadata})
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_client_metadata"
    assert await service.rows(OAuthClient) == []


@pytest.mark.parametrize(
    "padding",
    [
        {"jwks": {"keys": [{"kty": "oct", "k": "A" * 64_236}]}},  # the audit's: stored whole before
        {"unused_member": "x" * 40_000},
    ],
    ids=["jwks", "unknown member"],
)
async def test_registration_refuses_a_body_over_its_own_limit(
    service: RunningService, padding: dict[str, object]
) -> None:
    async with service.http() as http:
        response = await http.post("/register", json={**client_metadata(), **padding})
    assert response.status_code == 413, response.text[:300]
    assert response.json()["error"] == "request_too_large"
    assert await service.rows(OAuthClient) == []


async def test_registrations_are_capped_across_addresses_and_replicas(database_url: str) -> None:
    """Every /64 has its own per-address allowance, so only a count in the database bounds them all."""
    settings = {"oauth_registrations_per_hour": 3, "trusted_proxies": ["127.0.0.1"]}
    async with run_service(database_url, **settings) as a:
        async with a.runtime.sessions() as session, session.begin():
            session.add_all(
                [
                    OAuthClient(client_id="past-the-hour", info_json="{}", created_at=utcnow() - 61 * MINUTE),
                    OAuthClient(client_id="in-the-hour", info_json="{}", created_at=utcnow() - 50 * MINUTE),
                ]
            )
        sock = bound_socket()
        b_settings = make_settings(database_url, port_of(sock), public_base_url=a.base_url, **settings)
        async with run_service_on(b_settings, sock) as b, a.http() as to_a, b.http() as to_b:
            answers = [
                await http.post(
                    "/register", json=client_metadata(), headers={"X-Forwarded-For": f"2001:db8:2:{n}::1"}
                )
                for n, http in enumerate([to_a, to_b, to_b, to_a])
            ]
        assert [answer.status_code for answer in answers] == [201, 201, 429, 429]
        refused = answers[2]
        assert refused.json()["error"] == "too_many_requests"
        # The oldest of the hour's three ages out of it first, 50 minutes after it registered.
        assert 9 * 60 <= int(refused.headers["retry-after"]) <= 10 * 60
        assert len(await a.rows(OAuthClient)) == 4


async def test_registration_keeps_ordinary_metadata(service: RunningService) -> None:
    async with service.http() as http:
        response = await http.post(
            "/register",
            json={
                **client_metadata(),
                "contacts": ["admin@app.example"],
                "software_id": "app",
                "software_version": "1.0",
                "client_uri": "https://app.example/",
            },
        )
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("method", ["client_secret_post", "client_secret_basic"])
async def test_client_secrets_are_stored_hashed_and_still_authenticate(
    service: RunningService, method: str
) -> None:
    await service.add_user("conf")
    verifier, challenge = pkce_pair()
    async with service.http() as http:
        client = await register(http, token_endpoint_auth_method=method)
        secret = client["client_secret"]
        assert secret
        (row,) = await service.rows(OAuthClient, client_id=client["client_id"])
        assert secret not in row.info_json
        assert row.client_secret_hash == hashlib.sha256(secret.encode()).hexdigest()

        to_login = await authorize(service, http, client["client_id"], challenge)
        signed_in = await log_in_through_form(http, to_login.headers["location"], "conf", DEFAULT_PASSWORD)
        code = query_of((await decide_consent(http, signed_in.headers["location"])).headers["location"])[
            "code"
        ]

        def credentials(presented: str) -> dict[str, object]:
            if method == "client_secret_post":
                return {"data": {"client_secret": presented}}
            basic = base64.b64encode(f"{client['client_id']}:{presented}".encode()).decode()
            return {"headers": {"Authorization": f"Basic {basic}"}}

        token_request = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": client["redirect_uris"][0],
            "client_id": client["client_id"],
            "code_verifier": verifier,
        }
        for presented in (row.client_secret_hash, "wrong"):
            wrong = credentials(presented)
            refused = await http.post(
                "/token",
                data={**token_request, **wrong.get("data", {})},  # type: ignore[dict-item]
                headers=wrong.get("headers"),  # type: ignore[arg-type]
            )
            assert refused.status_code == 401, refused.text
        right = credentials(secret)
        accepted = await http.post(
            "/token",
            data={**token_request, **right.get("data", {})},  # type: ignore[dict-item]
            headers=right.get("headers"),  # type: ignore[arg-type]
        )
        assert accepted.status_code == 200, accepted.text


@pytest.mark.parametrize("path", ["/token", "/revoke"])
async def test_a_form_starlette_cannot_decode_is_an_invalid_request(
    service: RunningService, path: str
) -> None:
    async with service.http() as http:
        answer = await http.post(path, headers=UNDECODABLE_MULTIPART, content=UNDECODABLE_FORM)
        readable = await http.post(path, data={"client_id": "unknown"})  # the same field, readable
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_request"
    assert "form could not be read" in answer.json()["error_description"]
    assert answer.headers["cache-control"] == "no-store"
    assert readable.status_code == 401 and readable.json()["error"] == "invalid_client"
    refused = await service.rows(AuditEvent, kind=AuditKind.TOKEN_REQUEST_REFUSED.value)
    # The token endpoint's failed-request throttle counts it like any other refusal.
    assert sorted(json.loads(row.detail)["status"] for row in refused) == (
        [400, 401] if path == "/token" else []
    )


async def test_metadata_lists_the_token_endpoint_auth_methods_accepted(service: RunningService) -> None:
    async with service.http() as http:
        metadata = (await http.get("/.well-known/oauth-authorization-server")).json()
        public = await register(http, token_endpoint_auth_method="none")
    assert public["token_endpoint_auth_method"] == "none"
    assert set(metadata["token_endpoint_auth_methods_supported"]) == {
        "none",
        "client_secret_post",
        "client_secret_basic",
    }
    assert "none" in metadata["revocation_endpoint_auth_methods_supported"]
    assert metadata["registration_endpoint"] == f"{service.base_url}/register"
    assert metadata["issuer"] == service.base_url


# -- PostgreSQL: concurrent writers and several replicas ---------------------------------------


@pytest.fixture
def pg_url(pg_templates: DatabaseTemplates, tmp_path: Path) -> str:
    return pg_templates.fresh_url(tmp_path)


async def test_parallel_exchanges_and_refreshes_succeed_once(pg_url: str) -> None:
    async with run_service(pg_url) as service:
        await service.add_user("racer")
        async with service.http() as http:
            client_id, code, verifier = await signed_in_code(service, http, "racer")
            exchanges = await asyncio.gather(
                *(exchange_code(http, client_id, code, verifier) for _ in range(5))
            )
            assert sorted(response.status_code for response in exchanges) == [200, 400, 400, 400, 400]
            grants = {token.grant_id for token in await service.rows(Token, client_id=client_id)}
            assert len(grants) == 1
            # The losers presented a code already redeemed, so the winner's grant is revoked.
            (won,) = (response.json() for response in exchanges if response.status_code == 200)
            assert await whoami_status(service, won["access_token"]) == 401

        async with service.http() as http:  # a fresh browser, signed out, for a fresh grant
            client_id, tokens = await authorized_tokens(service, http, "racer")
            refreshes = await asyncio.gather(
                *(refresh_with(http, client_id, tokens["refresh_token"]) for _ in range(5))
            )
            assert sorted(response.status_code for response in refreshes) == [200, 400, 400, 400, 400]


@asynccontextmanager
async def two_replicas(database_url: str) -> AsyncIterator[tuple[RunningService, RunningService]]:
    """Two services on one database, one public address (A's), each with its own token cache."""
    async with run_service(database_url) as a:
        sock = bound_socket()
        settings = make_settings(database_url, port_of(sock), public_base_url=a.base_url)
        async with run_service_on(settings, sock) as b:
            for replica in (a, b):
                assert isinstance(replica.runtime.bus, PostgresBus)
                async with asyncio.timeout(10):
                    await replica.runtime.bus.listening.wait()
            yield a, b


async def test_revoking_on_one_replica_stops_the_token_on_another(pg_url: str) -> None:
    async with two_replicas(pg_url) as (a, b):
        await a.add_user("roamer")
        async with a.http() as http:
            client_id, tokens = await authorized_tokens(a, http, "roamer")
            assert await whoami_status(b, tokens["access_token"]) == 200  # now in B's cache
            revoked = await http.post(
                "/revoke", data={"token": tokens["access_token"], "client_id": client_id}
            )
            assert revoked.status_code == 200
        assert await refused_within_deadline(b, tokens["access_token"])


async def test_replaying_a_rotated_refresh_token_ends_the_grant_on_every_replica(pg_url: str) -> None:
    async with two_replicas(pg_url) as (a, b):
        await a.add_user("leaky")
        async with a.http() as http:
            client_id, first = await authorized_tokens(a, http, "leaky")
            rotated = await refresh_with(http, client_id, first["refresh_token"])
            assert rotated.status_code == 200
            second = rotated.json()
            assert await whoami_status(b, second["access_token"]) == 200  # now in B's cache
            replayed = await refresh_with(http, client_id, first["refresh_token"])
            assert replayed.status_code == 400
        assert await refused_within_deadline(b, second["access_token"])
        assert await whoami_status(a, second["access_token"]) == 401
        async with a.http() as http:
            assert (await refresh_with(http, client_id, second["refresh_token"])).status_code == 400


async def test_replaying_a_redeemed_code_ends_the_grant_on_every_replica(pg_url: str) -> None:
    async with two_replicas(pg_url) as (a, b):
        await a.add_user("replayed")
        async with a.http() as http:
            client_id, code, verifier = await signed_in_code(a, http, "replayed")
            exchanged = await exchange_code(http, client_id, code, verifier)
            assert exchanged.status_code == 200, exchanged.text
            tokens = exchanged.json()
            assert await whoami_status(b, tokens["access_token"]) == 200  # now in B's cache
            replayed = await exchange_code(http, client_id, code, verifier)
            assert replayed.status_code == 400
        assert await refused_within_deadline(b, tokens["access_token"])
        async with b.http() as http:
            assert (await refresh_with(http, client_id, tokens["refresh_token"])).status_code == 400


async def test_consent_page_sends_a_signed_out_browser_to_sign_in(service: RunningService) -> None:
    """The consent page needs a signed-in user; without one it sends the browser to sign in."""
    _, challenge = pkce_pair()
    async with service.http() as http:
        client = await register(http)
        to_login = await authorize(service, http, client["client_id"], challenge)
        authz = query_of(to_login.headers["location"])["authz"]
    async with httpx.AsyncClient(base_url=service.base_url) as stranger:
        page = await stranger.get("/authorize/consent", params={"authz": authz})
    assert page.status_code == 303
    assert page.headers["location"].startswith("/login?authz=")


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({}, "invalid_request"),
        ({"response_type": "token"}, "unsupported_response_type"),
        ({"scope": "not-registered"}, "invalid_scope"),
        ({"resource": "https://elsewhere.example/mcp"}, "invalid_target"),
        ({"code_challenge_method": "plain"}, "invalid_request"),
    ],
    ids=["bare", "response-type", "scope", "resource", "pkce-method"],
)
async def test_an_invalid_authorization_request_is_never_redirected(
    service: RunningService, params: dict[str, str], error: str
) -> None:
    """Anyone can register any https redirect URI, so an error redirect would be an open redirect."""
    async with service.http() as browser:
        client = await register(browser, redirect_uris=[EVIL_REDIRECT])
        query = {"client_id": client["client_id"], "state": "passed-through", **params}
        if params:  # otherwise valid
            query |= {"response_type": "code", "code_challenge": pkce_pair()[1], **params}
        for answer in (
            await browser.get("/authorize", params=query),
            await browser.post("/authorize", data=query),
        ):
            assert answer.status_code == 400, answer.headers.get("location")
            assert "location" not in answer.headers
            assert answer.headers["content-type"].startswith("text/html")
            assert f"({error}" in answer.text
            assert "passed-through" not in answer.text
            assert answer.headers["cache-control"] == "no-store"
        # The same request made valid goes on to sign in.
        valid = {**query, "response_type": "code", "code_challenge": pkce_pair()[1]}
        for name in ("scope", "resource", "code_challenge_method"):
            valid.pop(name, None)
        to_login = await browser.get("/authorize", params=valid)
    assert to_login.status_code == 302
    assert to_login.headers["location"].startswith(f"{service.base_url}/login?authz=")
