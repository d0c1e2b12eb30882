"""Bearer authentication for `/mcp`, from the SDK's own public pieces, put together as the SDK's
`streamable_http_app` puts them around its endpoint.

Starlette's `AuthenticationMiddleware` with the SDK's `BearerAuthBackend` verifies the token (and
its expiry and resource indicator); `AuthContextMiddleware` makes it `get_access_token()`'s answer
for the request and the tool calls it carries; `RequireAuthMiddleware` answers a request without a
valid token 401 with a `WWW-Authenticate` that names the protected-resource metadata. A token that
cannot be checked because the database is down raises, and the app's handler answers 503.
"""

from __future__ import annotations

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.server.auth.settings import AuthSettings
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import ASGIApp


def bearer_protected(app: ASGIApp, verifier: TokenVerifier, auth: AuthSettings) -> ASGIApp:
    """`app`, reachable only with a bearer token `verifier` accepts (for this resource, when
    `auth.validate_token_resource`), with the token's scopes covering `auth.required_scopes`."""
    resource = auth.resource_server_url
    required = RequireAuthMiddleware(
        app,
        list(auth.required_scopes or []),
        build_resource_metadata_url(resource) if resource is not None else None,
    )
    backend = BearerAuthBackend(
        verifier, resource_server_url=resource if auth.validate_token_resource else None
    )
    return AuthenticationMiddleware(AuthContextMiddleware(required), backend=backend)
