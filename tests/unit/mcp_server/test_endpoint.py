"""`sdk_endpoint` takes the SDK's authenticated `/mcp` endpoint out of a real SDK app, or refuses."""

from __future__ import annotations

import pytest
from mcp.server import MCPServer
from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from service.mcp_server.endpoint import sdk_endpoint


class NoTokens:
    async def verify_token(self, token: str) -> AccessToken | None:
        return None


def sdk_app(*, with_auth: bool) -> Starlette:
    kwargs: dict[str, object] = {}
    if with_auth:
        base = "http://127.0.0.1:8000"
        kwargs["token_verifier"] = NoTokens()
        kwargs["auth"] = AuthSettings.model_validate(
            {"issuer_url": base, "resource_server_url": f"{base}/mcp", "validate_token_resource": False}
        )
    return MCPServer("endpoint-test", **kwargs).streamable_http_app()  # type: ignore[arg-type]


def test_the_authenticated_endpoint_of_the_sdk_route_is_found() -> None:
    app = sdk_app(with_auth=True)
    endpoint = sdk_endpoint(app, "/mcp")
    assert isinstance(endpoint, RequireAuthMiddleware)
    [route] = [route for route in app.router.routes if getattr(route, "path", None) == "/mcp"]
    assert endpoint is route.app  # type: ignore[attr-defined]


def test_an_sdk_app_without_auth_is_refused() -> None:
    with pytest.raises(RuntimeError, match="authenticated endpoint"):
        sdk_endpoint(sdk_app(with_auth=False), "/mcp")


def test_a_missing_or_method_bound_route_is_refused() -> None:
    with pytest.raises(RuntimeError, match="0 routes"):
        sdk_endpoint(sdk_app(with_auth=True), "/elsewhere")

    async def answer(_: object) -> PlainTextResponse:
        return PlainTextResponse("")

    with pytest.raises(RuntimeError, match="authenticated endpoint"):
        sdk_endpoint(Starlette(routes=[Route("/mcp", answer, methods=["POST"])]), "/mcp")
