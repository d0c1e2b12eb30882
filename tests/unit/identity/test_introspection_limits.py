"""`IntrospectedTokens` against a stand-in issuer (httpx's `MockTransport`): the cap on
introspections in flight, and which refusals are remembered."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine

import httpx
import pytest

from service.identity.oidc.introspection_limits import IntrospectionLimits, IntrospectionRefused
from service.identity.oidc.tokens import ExternalToken, IntrospectedTokens

ISSUER = "https://issuer.example"
AUDIENCE = "https://mcp.example/mcp"
Issuer = Callable[[httpx.Request], Coroutine[None, None, httpx.Response]]


def introspected(issuer: Issuer, *, max_in_flight: int = 8) -> IntrospectedTokens:
    return IntrospectedTokens(
        httpx.AsyncClient(transport=httpx.MockTransport(issuer)),
        f"{ISSUER}/introspect",
        issuer=ISSUER,
        audience=AUDIENCE,
        client_id="us",
        client_secret="our-secret",
        limits=IntrospectionLimits(
            refusal_seconds=30, per_address_per_minute=100, max_in_flight=max_in_flight
        ),
    )


def active() -> httpx.Response:
    claims = {"active": True, "iss": ISSUER, "sub": "ada", "aud": AUDIENCE, "exp": int(time.time()) + 300}
    return httpx.Response(200, json=claims)


async def test_past_the_cap_in_flight_a_token_is_refused_without_asking() -> None:
    arrived, release = asyncio.Event(), asyncio.Event()
    asked: list[bytes] = []

    async def issuer(request: httpx.Request) -> httpx.Response:
        asked.append(request.content)
        if b"token=first" in request.content:
            # Only the first token is held at the issuer, so a second one asked about cannot hang.
            arrived.set()
            await release.wait()
        return httpx.Response(200, json={"active": False})

    tokens = introspected(issuer, max_in_flight=1)
    first = asyncio.create_task(tokens.validate("first"))
    await arrived.wait()
    with pytest.raises(IntrospectionRefused) as refused:
        await tokens.validate("second")
    assert refused.value.status_code == 503 and refused.value.retry_after_seconds >= 1
    assert len(asked) == 1
    release.set()
    assert await first is None
    # The place is given back: the next token is asked about.
    assert await tokens.validate("second") is None
    assert len(asked) == 2


async def test_only_the_issuers_refusals_are_remembered() -> None:
    answers = [httpx.Response(500), active(), httpx.Response(200, json={"active": False})]
    asked = 0

    async def issuer(_: httpx.Request) -> httpx.Response:
        nonlocal asked
        asked += 1
        return answers.pop(0) if answers else httpx.Response(200, json={"active": False})

    tokens = introspected(issuer)
    # The issuer failing says nothing about the token: it is asked about again.
    assert await tokens.validate("good") is None
    assert (await tokens.validate("good")) is not None
    assert await tokens.validate("bad") is None
    assert await tokens.validate("bad") is None
    assert asked == 3


async def test_concurrent_requests_for_one_token_share_one_introspection() -> None:
    arrived, release = asyncio.Event(), asyncio.Event()
    asked: list[bytes] = []

    async def issuer(request: httpx.Request) -> httpx.Response:
        asked.append(request.content)
        arrived.set()
        await release.wait()
        return active()

    tokens = introspected(issuer, max_in_flight=1)
    burst = [asyncio.create_task(tokens.validate("fresh")) for _ in range(20)]
    await arrived.wait()
    # Past the cap of one in flight, yet the others wait for that answer instead of being refused.
    release.set()
    answers = await asyncio.gather(*burst)
    assert all(answer is not None and answer.subject == "ada" for answer in answers)
    assert len(asked) == 1
    # Only while it is under way: a later request for the token asks again.
    assert await tokens.validate("fresh") is not None
    assert len(asked) == 2


async def test_the_others_ask_for_themselves_when_the_one_asking_gives_up() -> None:
    first_arrived, never = asyncio.Event(), asyncio.Event()
    asked = 0

    async def issuer(_: httpx.Request) -> httpx.Response:
        nonlocal asked
        asked += 1
        if asked == 1:
            first_arrived.set()
            await never.wait()  # the first asker's client hangs up while the issuer thinks
        return active()

    tokens = introspected(issuer)
    first = asyncio.create_task(tokens.validate("fresh"))
    await first_arrived.wait()
    follower_started = asyncio.Event()

    async def follow() -> ExternalToken | None:
        follower_started.set()
        # Runs without a pause up to its wait for the introspection under way.
        return await tokens.validate("fresh")

    waiting = asyncio.create_task(follow())
    await follower_started.wait()
    first.cancel()
    answer = await waiting
    assert answer is not None and answer.subject == "ada"
    assert asked == 2
