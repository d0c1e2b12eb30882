"""Every bad bearer gets 401 with a pointer to the protected-resource metadata, and no tool runs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest

from service.db.engine import create_engine, create_session_factory
from service.db.metadata import utcnow
from service.identity.models import Token
from tests.support.mcp_http import ACCEPT, post_initialize
from tests.support.service import RunningService, run_service


@pytest.fixture
async def uncached_service(database_url: str) -> AsyncIterator[RunningService]:
    """Token checks straight from the database: expiry and revocation edited there apply at once."""
    async with run_service(database_url, token_cache_seconds=0) as running:
        yield running


def assert_points_at_metadata(service: RunningService, headers: dict[str, str]) -> None:
    challenge = headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{service.base_url}/.well-known/oauth-protected-resource/mcp"' in challenge


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer  two words",
        "Basic dXNlcjpwYXNz",
        "Bearer mcp_pat_not-a-real-token",
        "Bearer \u00e9\u00e9".encode("latin-1"),
        "bearer " + "x" * 5000,
    ],
    ids=["missing", "empty", "no-token", "spaces", "basic", "unknown", "non-ascii", "huge"],
)
async def test_missing_or_malformed_tokens(
    service: RunningService, authorization: str | bytes | None
) -> None:
    status, headers = await post_initialize(service, authorization)
    assert status == 401
    assert_points_at_metadata(service, headers)


async def test_expired_token(uncached_service: RunningService) -> None:
    service = uncached_service
    await service.add_user("kim")
    issued = await service.personal_token("kim", ttl=timedelta(seconds=60))
    assert (await post_initialize(service, f"Bearer {issued.secret}"))[0] == 200
    engine = create_engine(service.settings.database.url)
    try:
        async with create_session_factory(engine)() as session, session.begin():
            token = await session.get(Token, issued.token.id)
            assert token is not None
            token.expires_at = utcnow() - timedelta(seconds=1)
            session.add(token)
    finally:
        await engine.dispose()
    status, headers = await post_initialize(service, f"Bearer {issued.secret}")
    assert status == 401
    assert_points_at_metadata(service, headers)


async def test_revoked_token(uncached_service: RunningService) -> None:
    service = uncached_service
    await service.add_user("liam")
    issued = await service.personal_token("liam")
    assert (await post_initialize(service, f"Bearer {issued.secret}"))[0] == 200
    assert await service.revoke(issued.token.id)
    assert (await post_initialize(service, f"Bearer {issued.secret}"))[0] == 401


async def test_token_issued_for_another_resource(service: RunningService) -> None:
    await service.add_user("mia")
    foreign = await service.personal_token("mia", resource="https://other.example/mcp")
    status, headers = await post_initialize(service, f"Bearer {foreign.secret}")
    assert status == 401
    assert_points_at_metadata(service, headers)


@pytest.mark.parametrize(
    "spelling",
    [lambda url: url.upper().replace("/MCP", "/mcp"), lambda url: url + "/"],
    ids=["upper-case-scheme-and-host", "trailing-slash"],
)
async def test_token_for_this_resource_spelled_differently_is_accepted(
    service: RunningService, spelling: Callable[[str], str]
) -> None:
    """The resource is compared as a URL, as the SDK's own check does, and each verdict is cached."""
    await service.add_user("mona")
    resource = spelling(service.settings.http.mcp_resource_url)
    assert resource != service.settings.http.mcp_resource_url
    issued = await service.personal_token("mona", resource=resource)
    for _ in range(2):
        assert (await post_initialize(service, f"Bearer {issued.secret}"))[0] == 200


async def test_malformed_json_rpc_body_gets_a_parse_error(service: RunningService) -> None:
    await service.add_user("noah")
    issued = await service.personal_token("noah")
    async with service.http() as http:
        response = await http.post(
            "/mcp",
            headers={
                "Authorization": f"Bearer {issued.secret}",
                "Accept": ACCEPT,
                "Content-Type": "application/json",
            },
            content=b'{"jsonrpc": "2.0", "id": 1, "method": ',
        )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700


async def test_cached_verification_still_honours_revocation_through_the_server(
    service: RunningService,
) -> None:
    """With the verification cache on (the default), revoking through this server applies at once."""
    await service.add_user("ora")
    issued = await service.personal_token("ora")
    assert (await post_initialize(service, f"Bearer {issued.secret}"))[0] == 200
    token = await service.runtime.oauth.load_access_token(issued.secret)
    assert token is not None
    await service.runtime.oauth.revoke_token(token)
    assert (await post_initialize(service, f"Bearer {issued.secret}"))[0] == 401
