"""The single authentication layer replaces exactly the SDK's pair, or refuses to start."""

from __future__ import annotations

import httpx
import pytest
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.provider import AccessToken
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from service.mcp_server.bearer import BearerAuthentication, _same_resource, use_single_layer_auth


class NoTokens:
    async def verify_token(self, token: str) -> AccessToken | None:
        return None


def sdk_pair() -> list[Middleware]:
    backend = BearerAuthBackend(NoTokens(), resource_server_url=None)
    return [Middleware(AuthenticationMiddleware, backend=backend), Middleware(AuthContextMiddleware)]


def test_the_pair_becomes_one_layer_and_the_rest_stays() -> None:
    app = Starlette(middleware=[Middleware(GZipMiddleware), *sdk_pair()])
    use_single_layer_auth(app)
    assert [entry.cls for entry in app.user_middleware] == [GZipMiddleware, BearerAuthentication]


@pytest.mark.parametrize(
    "middleware",
    [[], sdk_pair()[:1], sdk_pair()[::-1]],
    ids=["no-auth", "no-context-layer", "reordered"],
)
def test_an_unexpected_sdk_app_fails_at_start(middleware: list[Middleware]) -> None:
    with pytest.raises(RuntimeError):
        use_single_layer_auth(Starlette(middleware=middleware))


@pytest.mark.parametrize(
    ("resource", "same"),
    [
        ("http://127.0.0.1:8000/mcp", True),
        ("HTTP://127.0.0.1:8000/mcp/", True),
        ("https://example.com:443/mcp", False),
        ("http://127.0.0.1:8000/other", False),
        ("not a url", False),
        ("", False),
    ],
)
def test_resources_compare_as_urls(resource: str, same: bool) -> None:
    assert _same_resource(resource, "http://127.0.0.1:8000/mcp") is same


class OneToken:
    async def verify_token(self, token: str) -> AccessToken | None:
        if token != "good":
            return None
        return AccessToken(token=token, client_id="c", scopes=["read"], subject="someone")


async def test_the_returned_factory_checks_tokens_as_the_app_layer_does() -> None:
    backend = BearerAuthBackend(OneToken(), resource_server_url=None)
    app = Starlette(
        middleware=[Middleware(AuthenticationMiddleware, backend=backend), Middleware(AuthContextMiddleware)]
    )
    seen: list[tuple[bool, list[str]]] = []

    async def inner(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope["user"].is_authenticated, list(scope["auth"].scopes)))
        await PlainTextResponse("")(scope, receive, send)

    layer = use_single_layer_auth(app)(inner)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=layer), base_url="http://test") as client:
        await client.get("/", headers={"Authorization": "Bearer good"})
        await client.get("/", headers={"Authorization": "Bearer bad"})
        await client.get("/")
    assert seen == [(True, ["read"]), (False, []), (False, [])]
