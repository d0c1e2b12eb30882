"""Bearer authentication for the MCP app: one pure ASGI layer instead of the SDK's two.

The SDK's app authenticates with Starlette's `AuthenticationMiddleware` around a
`BearerAuthBackend`, then copies the user into a context variable with `AuthContextMiddleware`.
Per tool call that walks a `Headers` object to find one header and parses the token's resource
indicator as a URL again. This layer gives the same answers (same scope keys, same context
variable, same refusals) from the raw header list, and remembers each resource string's verdict.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware, auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from mcp.server.auth.provider import AccessToken, TokenVerifier
from pydantic import AnyHttpUrl, ValidationError
from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, UnauthenticatedUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from service.web.database_unavailable import unavailable_answer

logger = logging.getLogger(__name__)

_BEARER = "bearer "


class BearerAuthentication:
    """Verifies the bearer token, then sets `scope["auth"]`, `scope["user"]` and the SDK's
    `auth_context_var`, exactly as the SDK's middleware pair does. Requests without a valid token
    pass on unauthenticated: the SDK's `RequireAuthMiddleware` on `/mcp` answers them 401. A token
    that cannot be checked because the database is down is answered 503 here."""

    def __init__(
        self, app: ASGIApp, *, verifier: TokenVerifier, resource_server_url: AnyHttpUrl | str | None
    ) -> None:
        self.app = app
        self._verifier = verifier
        self._resource = (
            str(resource_server_url).removesuffix("/") if resource_server_url is not None else None
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        try:
            token = await self._verified_token(scope)
        except DBAPIError as exc:
            # The token store cannot be reached: 503 (come back later), not 401 (get a new token).
            answer = unavailable_answer(exc)
            if answer is None:
                raise
            await answer(scope, receive, send)
            return
        if token is None:
            scope["auth"], scope["user"] = AuthCredentials(), UnauthenticatedUser()
            await self.app(scope, receive, send)
            return
        user = AuthenticatedUser(token)
        scope["auth"], scope["user"] = AuthCredentials(token.scopes), user
        context = auth_context_var.set(user)
        try:
            await self.app(scope, receive, send)
        finally:
            auth_context_var.reset(context)

    async def _verified_token(self, scope: Scope) -> AccessToken | None:
        header = next((value for name, value in scope["headers"] if name == b"authorization"), None)
        if header is None:
            return None
        value = header.decode("latin-1")
        if value[:7].lower() != _BEARER:
            return None
        token = await self._verifier.verify_token(value[7:])
        if token is None:
            return None
        if token.expires_at and token.expires_at < int(time.time()):
            return None
        if self._resource is not None and not _same_resource(token.resource or "", self._resource):
            logger.warning(
                "Bearer token resource %r is not resource_server_url %s", token.resource, self._resource
            )
            return None
        return token


@functools.lru_cache(maxsize=1024)
def _same_resource(resource: str, expected: str) -> bool:
    """Compared as URLs (case and default-port spelling aside), a trailing slash aside.

    Cached: a server sees a handful of distinct resource strings, each once per token per call.
    """
    try:
        parsed = str(AnyHttpUrl(resource))
    except ValidationError:
        return False
    return parsed.removesuffix("/") == str(AnyHttpUrl(expected)).removesuffix("/")


def use_single_layer_auth(app: Starlette) -> Callable[[ASGIApp], BearerAuthentication]:
    """Swap the SDK app's authentication pair for `BearerAuthentication`, with the same verifier
    and resource check. Fails loudly if the SDK's app is no longer built the way this expects.

    Returns the layer's factory, to put the same check around an endpoint outside the app."""
    stack = app.user_middleware
    kinds: list[object] = [entry.cls for entry in stack]
    if AuthenticationMiddleware not in kinds or AuthContextMiddleware not in kinds:
        raise RuntimeError("the MCP app has no SDK bearer authentication to replace")
    at = kinds.index(AuthenticationMiddleware)
    if kinds[at : at + 2] != [AuthenticationMiddleware, AuthContextMiddleware]:
        raise RuntimeError("the SDK's authentication middleware pair is no longer adjacent")
    backend = stack[at].kwargs["backend"]
    if not isinstance(backend, BearerAuthBackend):
        raise RuntimeError(f"unexpected authentication backend {type(backend).__name__}")
    verifier, resource = backend.token_verifier, backend.resource_server_url
    stack[at : at + 2] = [Middleware(BearerAuthentication, verifier=verifier, resource_server_url=resource)]

    def around(inner: ASGIApp) -> BearerAuthentication:
        return BearerAuthentication(inner, verifier=verifier, resource_server_url=resource)

    return around
