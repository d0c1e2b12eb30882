"""The OAuth endpoints we serve ahead of the SDK's: /register, /token and the server metadata.

Each reuses the SDK's own handler and wraps it as the SDK does (CORS, request body limit); what
differs is /register's rate limit per client address, client secrets checked against their
digests at /token, and metadata that names every token endpoint auth method /token accepts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.token import TokenHandler
from mcp.server.auth.routes import build_metadata
from mcp.server.auth.settings import AuthSettings, RevocationOptions
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, RequestBodyLimitMiddleware
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, request_response
from starlette.types import ASGIApp

from service.identity.client_auth import HashedSecretAuthenticator
from service.identity.client_registration import client_address
from service.identity.oauth_provider import REGISTRATION_OPTIONS, TOKEN_ENDPOINT_AUTH_METHODS
from service.runtime import Runtime

router = APIRouter(tags=["oauth"])

NOT_SERVED = {"error": "not_found"}


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _as_sdk_serves_it(
    handler: Callable[[Request], Awaitable[Response]], methods: list[str], *, body_limit: bool = True
) -> ASGIApp:
    app: ASGIApp = request_response(handler)
    if body_limit:
        app = RequestBodyLimitMiddleware(app, DEFAULT_MAX_REQUEST_BODY_SIZE)
    return CORSMiddleware(
        app=app, allow_origins=["*"], allow_methods=methods, allow_headers=[MCP_PROTOCOL_VERSION_HEADER]
    )


async def register(request: Request) -> Response:
    runtime = _runtime(request)
    if runtime.oidc is not None:  # the external issuer registers clients, not us
        return JSONResponse(NOT_SERVED, status_code=404)
    address = client_address(request, runtime.client_addresses)
    if not runtime.registration_limiter.allow(address):
        return JSONResponse(
            {"error": "too_many_requests", "error_description": "too many client registrations; retry later"},
            status_code=429,
            headers={"Retry-After": str(runtime.registration_limiter.retry_after(address))},
        )
    return await RegistrationHandler(runtime.oauth, options=REGISTRATION_OPTIONS).handle(request)


async def token(request: Request) -> Response:
    runtime = _runtime(request)
    if runtime.oidc is not None:
        return JSONResponse(NOT_SERVED, status_code=404)
    handler = TokenHandler(runtime.oauth, HashedSecretAuthenticator(runtime.oauth))
    response: Response = await handler.handle(request)
    return response


async def authorization_server_metadata(request: Request) -> Response:
    runtime = _runtime(request)
    if runtime.oidc is not None:
        return JSONResponse(NOT_SERVED, status_code=404)
    settings = runtime.settings
    # Through AuthSettings, so the issuer is spelled exactly as the SDK spells it in tokens' `iss`.
    auth = AuthSettings.model_validate(
        {
            "issuer_url": settings.http.public_base_url,
            "resource_server_url": settings.http.mcp_resource_url,
            "validate_token_resource": True,
        }
    )
    metadata = build_metadata(auth.issuer_url, None, REGISTRATION_OPTIONS, RevocationOptions(enabled=True))
    metadata.token_endpoint_auth_methods_supported = TOKEN_ENDPOINT_AUTH_METHODS
    metadata.revocation_endpoint_auth_methods_supported = TOKEN_ENDPOINT_AUTH_METHODS
    return await MetadataHandler(metadata).handle(request)


router.routes.extend(
    [
        Route("/register", _as_sdk_serves_it(register, ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route("/token", _as_sdk_serves_it(token, ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route(
            "/.well-known/oauth-authorization-server",
            _as_sdk_serves_it(authorization_server_metadata, ["GET", "OPTIONS"], body_limit=False),
            methods=["GET", "OPTIONS"],
        ),
    ]
)
