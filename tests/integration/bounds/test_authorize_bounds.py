"""`/authorize` bounds: state, scope and code challenge sizes, and a sealed request the login and
consent pages always accept."""

from __future__ import annotations

import random
import secrets

import httpx

from service.identity.client_registration import MAX_SCOPE_LENGTH as MAX_REGISTERED_SCOPE_LENGTH
from service.identity.models import AuthorizationCode
from service.identity.oauth_provider import (
    MAX_AUTHZ_LENGTH,
    MAX_CODE_CHALLENGE_LENGTH,
    MAX_SCOPE_LENGTH,
    MAX_STATE_LENGTH,
)
from tests.support.browserless import sign_in_and_allow
from tests.support.oauth import (
    UNDECODABLE_FORM,
    UNDECODABLE_MULTIPART,
    authorize,
    pkce_pair,
    query_of,
    register,
)
from tests.support.service import DEFAULT_PASSWORD, RunningService


def assert_refused_as_invalid(answer: httpx.Response) -> None:
    """Refused with `invalid_request` on an error page: not sent on to sign in, nor to the client."""
    assert answer.status_code == 400, answer.text
    assert "location" not in answer.headers
    assert "(invalid_request: " in answer.text
    assert len(answer.text) < 5000  # the page does not repeat the request


async def test_the_longest_state_allowed_completes_the_flow(service: RunningService) -> None:
    await service.add_user("sam")
    state = secrets.token_urlsafe(MAX_STATE_LENGTH)[:MAX_STATE_LENGTH]
    async with service.http() as browser:
        client = await register(browser)
        to_login = await authorize(service, browser, client["client_id"], pkce_pair()[1], state=state)
        assert to_login.status_code == 302
        done = await sign_in_and_allow(browser, to_login.headers["location"], "sam", DEFAULT_PASSWORD)
    assert done.status_code == 303
    assert query_of(done.headers["location"])["state"] == state


async def test_an_over_long_state_scope_or_code_challenge_is_an_invalid_request(
    service: RunningService,
) -> None:
    # Registration bounds a client's scopes, but a request may repeat one it has.
    many_scopes = " ".join("scope0" for _ in range(MAX_SCOPE_LENGTH // 6))
    assert len(many_scopes) > MAX_SCOPE_LENGTH
    async with service.http() as browser:
        client = await register(browser, scope="scope0 scope1")
        client_id, challenge = client["client_id"], pkce_pair()[1]
        answers = [
            await authorize(service, browser, client_id, challenge, state="s" * (MAX_STATE_LENGTH + 1)),
            await authorize(service, browser, client_id, challenge, scope=many_scopes),
            await authorize(service, browser, client_id, "c" * (MAX_CODE_CHALLENGE_LENGTH + 1)),
        ]
    for answer in answers:
        assert_refused_as_invalid(answer)
    assert await service.rows(AuthorizationCode) == []


async def test_a_request_that_would_seal_too_long_is_an_invalid_request(service: RunningService) -> None:
    # Each within its bound in characters, but every character escapes to 12 in the sealed JSON.
    rng = random.Random(7)
    state, scope = (
        "".join(chr(rng.randrange(0x10000, 0x10FFFF)) for _ in range(length))
        for length in (MAX_STATE_LENGTH, MAX_REGISTERED_SCOPE_LENGTH)
    )
    async with service.http() as browser:
        client = await register(browser, scope=scope)
        answer = await authorize(
            service, browser, client["client_id"], pkce_pair()[1], state=state, scope=scope
        )
    assert_refused_as_invalid(answer)


async def test_login_and_consent_refuse_the_same_over_long_authz(service: RunningService) -> None:
    authz = "a" * (MAX_AUTHZ_LENGTH + 1)
    async with service.http() as browser:
        login = await browser.get("/login", params={"authz": authz})
        consent = await browser.get("/authorize/consent", params={"authz": authz})
    assert login.status_code == consent.status_code == 422


async def test_an_over_long_authz_with_a_failed_csrf_check_is_not_redirected(
    service: RunningService,
) -> None:
    async with service.http() as browser:  # no CSRF cookie, so the check fails
        answer = await browser.post(
            "/authorize/consent", data={"authz": "a" * (MAX_AUTHZ_LENGTH * 8), "decision": "allow"}
        )
    assert answer.status_code == 400, answer.headers.get("location", "")[:100]
    assert "location" not in answer.headers
    assert len(answer.text) < 5000  # the page does not repeat the request


async def test_a_posted_form_starlette_cannot_read_is_an_invalid_request(service: RunningService) -> None:
    """Multipart without a boundary or with a charset Starlette's decoding does not expect, or more
    fields than Starlette parses: a 400 naming the form, not the SDK's server_error nor a 500."""
    async with service.http() as browser:
        client = await register(browser)
        fields = {
            "response_type": "code",
            "client_id": client["client_id"],
            "code_challenge": pkce_pair()[1],
            "code_challenge_method": "S256",
        }
        answers = [
            await browser.post("/authorize", headers={"Content-Type": "multipart/form-data"}, content=b""),
            await browser.post("/authorize", headers=UNDECODABLE_MULTIPART, content=UNDECODABLE_FORM),
            await browser.post("/authorize", data={**fields, **{f"extra{n}": "x" for n in range(1001)}}),
        ]
        # The SDK reads a form from every method but GET.
        head = await browser.head("/authorize", headers={"Content-Type": "multipart/form-data"})
        posted = await browser.post("/authorize", data=fields)  # a readable form still works
    for answer in answers:
        assert_refused_as_invalid(answer)
        assert "its form could not be read" in answer.text
    assert head.status_code == 400
    assert posted.status_code == 302, posted.text
