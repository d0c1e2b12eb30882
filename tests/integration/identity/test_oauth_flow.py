"""The built-in OAuth 2.1 server end to end, with the SDK's own OAuth client and plain HTTP."""

from __future__ import annotations

import secrets

import httpx2
import pytest
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from service.identity.paths import MAX_NEXT_PATH_LENGTH
from tests.support.browserless import csrf_token, log_in_through_form, sign_in_and_allow
from tests.support.oauth import (
    REDIRECT_URI,
    authorize,
    exchange_code,
    pkce_pair,
    query_of,
    refresh_with,
    register,
    whoami_status,
)
from tests.support.service import DEFAULT_PASSWORD, RunningService


class MemoryTokenStorage(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_sdk_oauth_client_logs_in_and_calls_a_tool(service: RunningService, mode: str) -> None:
    await service.add_user("alice")
    landed: dict[str, str] = {}

    async def redirect_handler(authorization_url: str) -> None:
        async with service.http() as browser:
            to_login = await browser.get(authorization_url)
            assert to_login.status_code == 302
            assert to_login.headers["location"].startswith(f"{service.base_url}/login?authz=")
            done = await sign_in_and_allow(browser, to_login.headers["location"], "alice", DEFAULT_PASSWORD)
            assert done.status_code == 303, done.text
            landed["url"] = done.headers["location"]

    async def callback_handler() -> AuthorizationCodeResult:
        query = query_of(landed["url"])
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

    storage = MemoryTokenStorage()
    auth = OAuthClientProvider(
        server_url=service.mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name="test client",
            redirect_uris=[REDIRECT_URI],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    async with (
        httpx2.AsyncClient(auth=auth, timeout=30) as http,
        Client(streamable_http_client(service.mcp_url, http_client=http), mode=mode) as client,
    ):
        result = await client.call_tool("whoami", {})
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert result.structured_content is not None
    assert result.structured_content["username"] == "alice"
    assert storage.tokens is not None and storage.tokens.refresh_token
    assert landed["url"].startswith(REDIRECT_URI)


async def test_step_by_step_code_pkce_refresh_and_revoke(service: RunningService) -> None:
    await service.add_user("bob")
    verifier, challenge = pkce_pair()
    async with service.http() as http:
        client = await register(http)
        to_login = await authorize(service, http, client["client_id"], challenge)
        assert to_login.status_code == 302
        done = await sign_in_and_allow(http, to_login.headers["location"], "bob", DEFAULT_PASSWORD)
        assert done.status_code == 303
        callback = query_of(done.headers["location"])
        assert callback["state"] == "xyz"
        assert callback["iss"] == service.base_url

        wrong_verifier = await exchange_code(
            http, client["client_id"], callback["code"], secrets.token_urlsafe(48)
        )
        assert wrong_verifier.status_code == 400
        assert wrong_verifier.json()["error"] == "invalid_grant"

        exchanged = await exchange_code(http, client["client_id"], callback["code"], verifier)
        assert exchanged.status_code == 200, exchanged.text
        tokens = exchanged.json()
        assert tokens["token_type"].lower() == "bearer"
        assert await whoami_status(service, tokens["access_token"]) == 200

        refreshed = await refresh_with(http, client["client_id"], tokens["refresh_token"])
        assert refreshed.status_code == 200, refreshed.text
        new_tokens = refreshed.json()
        assert new_tokens["refresh_token"] != tokens["refresh_token"]
        assert await whoami_status(service, new_tokens["access_token"]) == 200

        revoked = await http.post(
            "/revoke", data={"token": new_tokens["access_token"], "client_id": client["client_id"]}
        )
        assert revoked.status_code == 200
        assert await whoami_status(service, new_tokens["access_token"]) == 401
        # Revocation ends the whole grant, so the refresh token minted with it is dead too.
        after_revoke = await refresh_with(http, client["client_id"], new_tokens["refresh_token"])
        assert after_revoke.status_code == 400


async def test_reusing_a_rotated_refresh_token_ends_the_grant(service: RunningService) -> None:
    await service.add_user("carol")
    verifier, challenge = pkce_pair()
    async with service.http() as http:
        client = await register(http)
        to_login = await authorize(service, http, client["client_id"], challenge)
        done = await sign_in_and_allow(http, to_login.headers["location"], "carol", DEFAULT_PASSWORD)
        code = query_of(done.headers["location"])["code"]
        first = (await exchange_code(http, client["client_id"], code, verifier)).json()
        second = (await refresh_with(http, client["client_id"], first["refresh_token"])).json()
        stolen = await refresh_with(http, client["client_id"], first["refresh_token"])
        assert stolen.status_code == 400
        assert await whoami_status(service, second["access_token"]) == 401


async def test_authorize_refuses_tokens_for_another_resource(service: RunningService) -> None:
    _, challenge = pkce_pair()
    async with service.http() as http:
        client = await register(http)
        response = await authorize(
            service, http, client["client_id"], challenge, resource="https://elsewhere.example/mcp"
        )
    assert response.status_code == 400
    assert "location" not in response.headers
    assert "(invalid_target: " in response.text


async def test_wrong_password_and_missing_csrf_are_refused(service: RunningService) -> None:
    await service.add_user("dave")
    async with service.http() as http:
        wrong = await log_in_through_form(http, "/login?next=/account", "dave", "not the password")
        assert wrong.status_code == 401
        assert "Wrong username or password" in wrong.text
        assert "set-cookie" not in wrong.headers or "session=" not in wrong.headers["set-cookie"]
    async with service.http() as fresh:
        forged = await fresh.post("/login", data={"username": "dave", "password": DEFAULT_PASSWORD})
        assert forged.status_code == 400
        assert "session=" not in forged.headers.get("set-cookie", "")


async def test_login_sets_a_strict_session_cookie(service: RunningService) -> None:
    await service.add_user("erin")
    async with service.http() as http:
        done = await log_in_through_form(http, "/login?next=/account", "erin", DEFAULT_PASSWORD)
        assert done.status_code == 303
        assert done.headers["location"] == "/account"
        cookie = next(v for v in done.headers.get_list("set-cookie") if v.startswith("session="))
        attributes = {part.strip().lower() for part in cookie.split(";")}
        assert "httponly" in attributes
        assert "samesite=lax" in attributes
        assert "secure" not in attributes  # development mode; production uses __Host- and Secure
        account = await http.get("/account")
        assert "signed in as erin" in account.text


async def test_login_refuses_open_redirects(service: RunningService) -> None:
    await service.add_user("frank")
    async with service.http() as http:
        done = await log_in_through_form(http, "/login?next=//evil.example/x", "frank", DEFAULT_PASSWORD)
    assert done.status_code == 303
    assert done.headers["location"] == "/account"


async def test_an_over_long_next_is_ignored_like_an_unsafe_one(service: RunningService) -> None:
    await service.add_user("gina")
    long_next = "/" + "a" * MAX_NEXT_PATH_LENGTH
    async with service.http() as http:
        page = await http.get("/login", params={"next": long_next})
        assert page.status_code == 200
        assert 'name="next"' not in page.text
        fields = {"csrf_token": csrf_token(page.text), "username": "gina", "password": DEFAULT_PASSWORD}
        done = await http.post("/login", data={**fields, "next": "/" + "a" * 900_000})
        assert (done.status_code, done.headers["location"]) == (303, "/account")
        token = csrf_token((await http.get("/login")).text)
        out = await http.post("/logout", data={"csrf_token": token, "next": long_next})
        assert (out.status_code, out.headers["location"]) == (303, "/login")
        # The longest path still allowed is honoured.
        kept = "/" + "b" * (MAX_NEXT_PATH_LENGTH - 1)
        again = await http.get("/login", params={"next": kept})
        fields = {"csrf_token": csrf_token(again.text), "username": "gina", "password": DEFAULT_PASSWORD}
        back = await http.post("/login", data={**fields, "next": kept})
        assert (back.status_code, back.headers["location"]) == (303, kept)
