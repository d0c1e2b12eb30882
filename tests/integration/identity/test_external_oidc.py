"""/mcp behind an external OpenID Provider (a real oidc-provider process): which tokens get in.

Tokens come from the provider itself (authorization code + PKCE, or client credentials), or are
signed here with the provider's own key when a claim must be wrong in one precise way.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from joserfc import jws

from service.identity.models import User
from service.identity.oidc.models import ExternalIdentity
from tests.support.mcp_http import ACCEPT, INITIALIZE, post_initialize
from tests.support.oidc_provider import (
    CLI_CLIENT_ID,
    OidcProvider,
    new_signing_key,
    run_oidc_provider,
    run_service_with_provider,
)
from tests.support.service import RunningService

Stack = tuple[OidcProvider, RunningService]


@pytest.fixture
async def stack(database_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    async with run_service_with_provider(database_url, tmp_path, keys=[new_signing_key("k1")]) as running:
        yield running


def claims_for(provider: OidcProvider, service: RunningService, **changes: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {
        "iss": provider.issuer,
        "sub": "grace",
        "aud": service.mcp_url,
        "client_id": CLI_CLIENT_ID,
        "scope": "mcp",
        "iat": now,
        "exp": now + 300,
    }
    claims.update(changes)
    return claims


async def status_with(service: RunningService, token: str) -> int:
    return (await post_initialize(service, f"Bearer {token}"))[0]


INTROSPECTION_PATH = "/token/introspection"  # oidc-provider's default


async def introspections(provider: OidcProvider) -> int:
    return await provider.requests_served("POST", INTROSPECTION_PATH)


async def initialize_from(service: RunningService, token: str, address: str) -> tuple[int, dict[str, str]]:
    """`initialize` with `token`, from `address` as a trusted proxy in front of the service says."""
    headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT, "X-Forwarded-For": address}
    async with service.http() as http:
        response = await http.post("/mcp", headers=headers, json=INITIALIZE)
    return response.status_code, dict(response.headers)


async def test_protected_resource_metadata_names_the_issuer(stack: Stack) -> None:
    provider, service = stack
    async with service.http() as http:
        metadata = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
        assert metadata["resource"] == service.mcp_url
        assert [url.rstrip("/") for url in metadata["authorization_servers"]] == [provider.issuer]
        # Our own authorization server is not served: clients go to the issuer.
        assert (await http.get("/.well-known/oauth-authorization-server")).status_code == 404
        assert (await http.get("/authorize", params={"client_id": "x"})).status_code == 404
        assert (await http.post("/token", data={"grant_type": "client_credentials"})).status_code == 404
        assert (await http.post("/register", json={"redirect_uris": ["http://x/cb"]})).status_code == 404
    status, headers = await post_initialize(service, None)
    assert status == 401
    assert (
        f'resource_metadata="{service.base_url}/.well-known/oauth-protected-resource/mcp"'
        in headers["www-authenticate"]
    )


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sdk_client_calls_a_free_tool_with_the_providers_token(stack: Stack, mode: str) -> None:
    provider, service = stack
    token = await provider.user_access_token("ada", service.mcp_url)
    async with service.mcp_client(token, mode=mode) as client:
        first = await client.call_tool("whoami", {})
        second = await client.call_tool("whoami", {})
    assert not first.is_error, first
    assert first.structured_content is not None
    assert first.structured_content["username"] == "ada"
    assert first.structured_content["client_id"] == CLI_CLIENT_ID
    assert second.structured_content == first.structured_content
    [mapping] = await service.rows(ExternalIdentity)
    assert (mapping.issuer, mapping.subject) == (provider.issuer, "ada")
    [user] = await service.rows(User, id=mapping.user_id)
    assert first.structured_content["user_id"] == user.id and user.username == "ada"


async def test_same_username_at_the_provider_gets_its_own_account(stack: Stack) -> None:
    provider, service = stack
    await service.add_user("ada")  # a local account already holds the name
    token = await provider.user_access_token("ada", service.mcp_url)
    async with service.mcp_client(token) as client:
        result = await client.call_tool("whoami", {})
    assert result.structured_content is not None
    assert result.structured_content["username"].startswith("ada-")


async def test_token_for_another_audience_is_refused(stack: Stack) -> None:
    provider, service = stack
    assert await status_with(service, await provider.client_credentials_token(service.mcp_url)) == 200
    other = await provider.client_credentials_token("https://other-api.example/")
    assert await status_with(service, other) == 401


async def test_token_from_another_issuer_with_the_same_key_is_refused(stack: Stack, tmp_path: Path) -> None:
    provider, service = stack
    async with run_oidc_provider(tmp_path, keys=provider.keys) as impostor:
        token = await impostor.client_credentials_token(service.mcp_url)
    assert await status_with(service, token) == 401
    assert await status_with(service, provider.sign(claims_for(provider, service))) == 200


async def test_expired_and_not_yet_valid_tokens_are_refused(stack: Stack) -> None:
    provider, service = stack
    now = int(time.time())
    assert await status_with(service, provider.sign(claims_for(provider, service))) == 200
    expired = provider.sign(claims_for(provider, service, iat=now - 600, exp=now - 120))
    assert await status_with(service, expired) == 401
    early = provider.sign(claims_for(provider, service, nbf=now + 600))
    assert await status_with(service, early) == 401
    # The issuer's clock a little ahead of ours is tolerated (the SDK itself refuses any past `exp`).
    skewed = provider.sign(claims_for(provider, service, iat=now + 5, nbf=now + 5))
    assert await status_with(service, skewed) == 200


async def test_bad_signatures_are_refused(stack: Stack) -> None:
    provider, service = stack
    forged = provider.sign(claims_for(provider, service), key=new_signing_key("k1"))  # same kid, other key
    assert await status_with(service, forged) == 401
    genuine = await provider.client_credentials_token(service.mcp_url)
    head, payload, signature = genuine.split(".")
    tampered_payload = provider.sign(claims_for(provider, service, sub="mallory")).split(".")[1]
    assert await status_with(service, f"{head}.{tampered_payload}.{signature}") == 401
    assert await status_with(service, f"{head}.{payload}.{signature[:-4]}AAAA") == 401
    assert await status_with(service, f"{head}.{payload}.") == 401
    unsigned = provider.sign(claims_for(provider, service)).split(".")
    assert await status_with(service, f"eyJhbGciOiJub25lIn0.{unsigned[1]}.") == 401  # alg none
    assert await status_with(service, genuine) == 200


async def test_key_rotation_refetches_the_jwks(database_url: str, tmp_path: Path) -> None:
    old, new = new_signing_key("k-old"), new_signing_key("k-new")
    async with run_service_with_provider(
        database_url, tmp_path, keys=[old], oidc_jwks_min_refresh_seconds=0
    ) as (provider, service):
        assert await status_with(service, await provider.client_credentials_token(service.mcp_url)) == 200
        keys = service.runtime.oidc.keys  # type: ignore[union-attr]
        assert keys.fetches == 1
        provider.process.terminate()
        await provider.process.wait()
        # The provider comes back on the same issuer, signing with a new key and still publishing the old.
        async with run_oidc_provider(tmp_path, keys=[new, old], port=provider.port) as rotated:
            token = await rotated.client_credentials_token(service.mcp_url)
            assert jws.extract_compact(token.encode()).headers()["kid"] == "k-new"
            assert await status_with(service, token) == 200
            assert keys.fetches == 2
            assert await status_with(service, rotated.sign(claims_for(rotated, service), key=old)) == 200
            assert keys.fetches == 2


async def test_unknown_key_ids_refetch_at_most_once_per_interval(database_url: str, tmp_path: Path) -> None:
    async with run_service_with_provider(
        database_url, tmp_path, keys=[new_signing_key("k1")], oidc_jwks_min_refresh_seconds=3600
    ) as (provider, service):
        assert await status_with(service, provider.sign(claims_for(provider, service))) == 200
        keys = service.runtime.oidc.keys  # type: ignore[union-attr]
        assert keys.fetches == 1
        for index in range(5):
            stranger = provider.sign(claims_for(provider, service), key=new_signing_key(f"unknown-{index}"))
            assert await status_with(service, stranger) == 401
        assert keys.fetches == 1


async def test_opaque_tokens_by_introspection(database_url: str, tmp_path: Path) -> None:
    async with run_service_with_provider(
        database_url,
        tmp_path,
        keys=[new_signing_key("k1")],
        access_token_format="opaque",
        oidc_introspection=True,
    ) as (provider, service):
        token = await provider.user_access_token("opal", service.mcp_url)
        assert token.count(".") == 0, "the provider should issue an opaque token here"
        async with service.mcp_client(token) as client:
            result = await client.call_tool("whoami", {})
        assert result.structured_content is not None
        assert result.structured_content["username"] == "opal"
        other = await provider.client_credentials_token("https://other-api.example/")
        assert await status_with(service, other) == 401
        assert await status_with(service, "not-a-token-the-provider-issued") == 401


async def test_a_refused_token_is_introspected_once(database_url: str, tmp_path: Path) -> None:
    async with run_service_with_provider(
        database_url,
        tmp_path,
        keys=[new_signing_key("k1")],
        access_token_format="opaque",
        oidc_introspection=True,
    ) as (provider, service):
        before = await introspections(provider)
        for _ in range(5):
            assert await status_with(service, "made-up-token") == 401
        assert await introspections(provider) == before + 1
        # A genuine token is still introspected once, then served from the cache of accepted ones.
        token = await provider.user_access_token("opal", service.mcp_url)
        for _ in range(3):
            assert await status_with(service, token) == 200
        assert await introspections(provider) == before + 2


async def test_introspections_are_budgeted_per_client_address(database_url: str, tmp_path: Path) -> None:
    async with run_service_with_provider(
        database_url,
        tmp_path,
        keys=[new_signing_key("k1")],
        access_token_format="opaque",
        oidc_introspection=True,
        oidc_introspections_per_address_per_minute=3,
        trusted_proxies=["127.0.0.1"],
    ) as (provider, service):
        attacker, neighbour = "198.51.100.1", "198.51.100.2"
        token = await provider.user_access_token("opal", service.mcp_url)
        before = await introspections(provider)
        statuses = [(await initialize_from(service, f"made-up-{n}", attacker))[0] for n in range(10)]
        assert statuses == [401] * 3 + [429] * 7
        assert await introspections(provider) == before + 3
        status, headers = await initialize_from(service, "made-up-10", attacker)
        assert status == 429 and int(headers["retry-after"]) >= 1
        # Another address's budget is its own: its genuine token is introspected and accepted.
        assert (await initialize_from(service, token, neighbour))[0] == 200
        assert await introspections(provider) == before + 4
        # Once accepted, the token is served from the cache, even from the exhausted address.
        assert (await initialize_from(service, token, attacker))[0] == 200
        assert await introspections(provider) == before + 4
