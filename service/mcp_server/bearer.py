"""Bearer authentication for `/mcp`, from the SDK's own public pieces, put together as the SDK's
`streamable_http_app` puts them around its endpoint.

Starlette's `AuthenticationMiddleware` with the SDK's `BearerAuthBackend` verifies the token (and
its expiry and resource indicator); `AuthContextMiddleware` makes it `get_access_token()`'s answer
for the request and the tool calls it carries; `RequireAuthMiddleware` answers a request without a
valid token 401 with a `WWW-Authenticate` that names the protected-resource metadata. A token that
cannot be checked because the database is down raises, and the app's handler answers 503.

Outermost, `ClientAddressForVerifier` tells the verifier the request's client address (the SDK's
`TokenVerifier` gets only the token), so an external issuer's introspections can be budgeted per
address; a token refused because such a budget ran out is answered 429 (503 when the replica's cap
on introspections in flight is reached) with `Retry-After`, not 401: the token may well be good.
"""

from __future__ import annotations

import logging

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.server.auth.settings import AuthSettings
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from service.identity.oidc.introspection_limits import CLIENT_ADDRESS, IntrospectionRefused
from service.mcp_server.refusal import refusal
from service.web.client_address import ClientAddresses

logger = logging.getLogger(__name__)


class ClientAddressForVerifier:
    """Sets `CLIENT_ADDRESS` while the request is authenticated and handled, and answers an
    `IntrospectionRefused` raised while verifying its token."""

    def __init__(self, app: ASGIApp, addresses: ClientAddresses) -> None:
        self.app = app
        self._addresses = addresses

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reset = CLIENT_ADDRESS.set(self._addresses.of(scope))
        try:
            await self.app(scope, receive, send)
        except IntrospectionRefused as exc:
            # Raised by the verifier only, before any response has started.
            logger.info("refused an MCP request before introspecting its token: %s", exc)
            response = refusal(str(exc), status_code=exc.status_code, retry_after=exc.retry_after_seconds)
            await response(scope, receive, send)
        finally:
            CLIENT_ADDRESS.reset(reset)


def bearer_protected(
    app: ASGIApp, verifier: TokenVerifier, auth: AuthSettings, addresses: ClientAddresses | None
) -> ASGIApp:
    """`app`, reachable only with a bearer token `verifier` accepts (for this resource, when
    `auth.validate_token_resource`), with the token's scopes covering `auth.required_scopes`;
    `addresses` when the verifier budgets work per client address (introspection), else None."""
    resource = auth.resource_server_url
    required = RequireAuthMiddleware(
        app,
        list(auth.required_scopes or []),
        build_resource_metadata_url(resource) if resource is not None else None,
    )
    backend = BearerAuthBackend(
        verifier, resource_server_url=resource if auth.validate_token_resource else None
    )
    authenticated = AuthenticationMiddleware(AuthContextMiddleware(required), backend=backend)
    return authenticated if addresses is None else ClientAddressForVerifier(authenticated, addresses)
