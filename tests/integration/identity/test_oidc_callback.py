"""`/oidc/callback` costs a bounded number of token requests at the provider: a sign-in's state is
redeemed once, and each client address only so often. Counted at a real oidc-provider process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from service.identity.oidc.login import CALLBACK_PATH
from service.identity.oidc.models import ConsumedLoginState
from service.identity.oidc.states import state_hash
from tests.support.oidc_provider import OidcProvider, new_signing_key, run_service_with_provider
from tests.support.service import RunningService

Stack = tuple[OidcProvider, RunningService]


@pytest.fixture
async def stack(database_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    async with run_service_with_provider(database_url, tmp_path, keys=[new_signing_key("k1")]) as running:
        yield running


async def get(http: httpx.AsyncClient, url: str, cookie: str) -> httpx.Response:
    """`url` with only `cookie` (`name=value`), as a client replaying a captured cookie sends it."""
    http.cookies.clear()
    return await http.get(url, headers={"cookie": cookie})


async def start_login(http: httpx.AsyncClient) -> tuple[str, str, str]:
    """`GET /login`: (the provider URL it sends the browser to, its state, the login cookie)."""
    response = await http.get("/login", params={"next": "/account"})
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    [state] = parse_qs(urlsplit(location).query)["state"]
    [cookie] = [value.split(";")[0] for value in response.headers.get_list("set-cookie")]
    return location, state, cookie


async def test_a_sign_in_is_redeemed_once(stack: Stack) -> None:
    provider, service = stack
    async with service.http() as http:
        authorization_url, state, cookie = await start_login(http)
        callback = await provider.sign_in(authorization_url, "ada", service.base_url + CALLBACK_PATH)
        before = await provider.token_requests()
        signed_in = await get(http, callback, cookie)
        assert signed_in.status_code == 303, signed_in.text
        assert signed_in.headers["location"] == "/account"
        assert await provider.token_requests() == before + 1
        [consumed] = await service.rows(ConsumedLoginState)
        assert consumed.state_hash == state_hash(state)
        # The same answer again, and with other codes: refused here, nothing sent to the provider.
        other_code = callback.replace("code=", "code=x")
        for replay in (callback, other_code, f"{CALLBACK_PATH}?state={state}&code=c1"):
            refused = await get(http, replay, cookie)
            assert refused.status_code == 400
            assert "This sign-in was already used" in refused.text
        assert await provider.token_requests() == before + 1


async def test_a_replayed_state_sends_one_token_request(stack: Stack) -> None:
    """The reported attack: one `GET /login`, then its cookie and state with a new code each time."""
    provider, service = stack
    async with service.http() as http:
        _, state, cookie = await start_login(http)
        before = await provider.token_requests()
        first = await get(http, f"{CALLBACK_PATH}?state={state}&code=c0", cookie)
        assert first.status_code == 400
        assert "did not accept the sign-in" in first.text  # the provider refused the made-up code
        for index in range(1, 10):
            replay = await get(http, f"{CALLBACK_PATH}?state={state}&code=c{index}", cookie)
            assert replay.status_code == 400
            assert "This sign-in was already used" in replay.text
    assert await provider.token_requests() == before + 1


async def test_callbacks_per_address_are_rate_limited(database_url: str, tmp_path: Path) -> None:
    async with run_service_with_provider(
        database_url, tmp_path, keys=[new_signing_key("k1")], oidc_callbacks_per_address_per_hour=3
    ) as (provider, service):
        async with service.http() as http:
            before = await provider.token_requests()
            for index in range(3):
                _, state, cookie = await start_login(http)
                refused = await get(http, f"{CALLBACK_PATH}?state={state}&code=c{index}", cookie)
                assert refused.status_code == 400
            _, state, cookie = await start_login(http)
            throttled = await get(http, f"{CALLBACK_PATH}?state={state}&code=c3", cookie)
            assert throttled.status_code == 429
            assert int(throttled.headers["retry-after"]) >= 1
            assert "Too many sign-ins" in throttled.text
            # A wrong state is still answered as before, at no cost: the limit is for redemptions.
            wrong = await get(http, f"{CALLBACK_PATH}?state=not-the-state&code=c4", cookie)
            assert wrong.status_code == 400
        assert await provider.token_requests() == before + 3
        # The refused answer's state was not consumed, so it can still be redeemed once the rate allows.
        assert state_hash(state) not in {row.state_hash for row in await service.rows(ConsumedLoginState)}


async def test_overlong_state_and_code_are_refused_unsent(stack: Stack) -> None:
    provider, service = stack
    async with service.http() as http:
        _, state, cookie = await start_login(http)
        before = await provider.token_requests()
        long_state = await get(http, f"{CALLBACK_PATH}?state={state}{'x' * 200}&code=c0", cookie)
        assert long_state.status_code == 400
        long_code = await get(http, f"{CALLBACK_PATH}?state={state}&code={'c' * 5000}", cookie)
        assert long_code.status_code == 400
        assert "too long" in long_code.text
    assert await provider.token_requests() == before
    assert await service.rows(ConsumedLoginState) == []
