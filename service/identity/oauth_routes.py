"""The OAuth endpoints we serve ahead of the SDK's: /register, /authorize, /token and the server
metadata.

Each reuses the SDK's own handler and wraps it as the SDK does (CORS, request body limit); what
differs is /register's rate limits (per client address, and across the deployment), /authorize
answering an invalid request with an error page instead of a redirect, client secrets checked
against their digests at /token, and metadata that names every token endpoint auth method /token
accepts.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter
from mcp.server.auth.handlers.authorize import AuthorizationHandler
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

from service.dependencies import (
    get_client_addresses,
    get_oauth,
    get_oidc,
    get_pages,
    get_registration_limiter,
    get_settings,
)
from service.identity.client_auth import HashedSecretAuthenticator
from service.identity.client_registration import client_address
from service.identity.oauth_forms import UnreadableForm, invalid_request, read_form
from service.identity.oauth_provider import REGISTRATION_OPTIONS, TOKEN_ENDPOINT_AUTH_METHODS

router = APIRouter(tags=["oauth"])

NOT_SERVED = {"error": "not_found"}


def _as_sdk_serves_it(
    handler: Callable[[Request], Awaitable[Response]], methods: list[str], *, body_limit: bool = True
) -> ASGIApp:
    app: ASGIApp = request_response(handler)
    if body_limit:
        app = RequestBodyLimitMiddleware(app, DEFAULT_MAX_REQUEST_BODY_SIZE)
    return CORSMiddleware(
        app=app, allow_origins=["*"], allow_methods=methods, allow_headers=[MCP_PROTOCOL_VERSION_HEADER]
    )


# Plain Starlette handlers (the SDK's handlers take a bare request): they await the getters that
# FastAPI endpoints receive as dependencies.
async def register(request: Request) -> Response:
    if await get_oidc(request) is not None:  # the external issuer registers clients, not us
        return JSONResponse(NOT_SERVED, status_code=404)
    address = client_address(request, await get_client_addresses(request))
    limiter = await get_registration_limiter(request)
    if not limiter.allow(address):
        return _too_many_registrations(limiter.retry_after(address))
    oauth = await get_oauth(request)
    # After the per-address limit, so one address cannot make every request read the database.
    wait = await oauth.registration_wait((await get_settings(request)).identity.oauth_registrations_per_hour)
    if wait is not None:
        return _too_many_registrations(wait)
    return await RegistrationHandler(oauth, options=REGISTRATION_OPTIONS).handle(request)


def _too_many_registrations(retry_after: int) -> Response:
    """429 with `Retry-After`, and a body shaped as RFC 7591's errors are."""
    return JSONResponse(
        {"error": "too_many_requests", "error_description": "too many client registrations; retry later"},
        status_code=429,
        headers={"Retry-After": str(retry_after)},
    )


MAX_SHOWN_DESCRIPTION = 300  # of the SDK's error description, which may quote the request


def _authorization_error(answer: Response) -> tuple[str, str]:
    """The SDK's (error, description) from its error answer: a redirect to the client carrying them
    in its query, or a JSON body."""
    location = answer.headers.get("location")
    if location is not None:
        fields = {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}
    else:
        try:
            body = json.loads(bytes(answer.body))
        except ValueError:
            body = None
        fields = body if isinstance(body, dict) else {}
    error, description = fields.get("error"), fields.get("error_description")
    return (
        error if isinstance(error, str) else "invalid_request",
        description if isinstance(description, str) else "",
    )


async def authorize(request: Request) -> Response:
    """The SDK's /authorize, except that only a valid request leaves it by redirect (to sign in).

    The SDK sends most invalid requests back to the client's redirect URI with an error (RFC 6749
    §4.1.2.1); as anyone may register a client with any https redirect URI, that makes /authorize
    an open redirector (RFC 9700 §4.11.2), so here every invalid request gets an error page. Errors
    after the user signed in and chose the client (access_denied) still go back to it.
    """
    if await get_oidc(request) is not None:
        return JSONResponse(NOT_SERVED, status_code=404)
    if request.method != "GET":
        # The SDK's handler reads a form from every method but GET (HEAD and POST here), and answers
        # one Starlette cannot read (multipart without a boundary or with an odd charset, over 1,000
        # fields) with its own server_error or a 500. Read here first: Starlette keeps the form it
        # parsed on the request, and the handler reads that one.
        try:
            await read_form(request)
        except UnreadableForm as unreadable:
            problem = f"its form could not be read ({unreadable.reason})"
            return await _refused(request, "invalid_request", problem)
    oauth = await get_oauth(request)
    answer: Response = await AuthorizationHandler(oauth).handle(request)
    if oauth.sends_to_sign_in(answer.headers.get("location")):
        return answer
    return await _refused(request, *_authorization_error(answer))


async def _refused(request: Request, error: str, description: str) -> Response:
    pages = await get_pages(request)
    page = pages.message(
        "Authorization request refused",
        f"Your MCP client's authorization request is invalid ({error}"
        + (f": {description[:MAX_SHOWN_DESCRIPTION]}" if description else "")
        + "). Start again from your MCP client, or tell its developer.",
        status_code=500 if error == "server_error" else 400,
    )
    page.headers["Cache-Control"] = "no-store"
    return page


async def token(request: Request) -> Response:
    if await get_oidc(request) is not None:
        return JSONResponse(NOT_SERVED, status_code=404)
    try:  # here, as the SDK's handler would answer an unreadable form with a 500
        await read_form(request)
    except UnreadableForm as unreadable:
        return invalid_request(unreadable)
    oauth = await get_oauth(request)
    handler = TokenHandler(oauth, HashedSecretAuthenticator(oauth))
    response: Response = await handler.handle(request)
    return response


async def authorization_server_metadata(request: Request) -> Response:
    if await get_oidc(request) is not None:
        return JSONResponse(NOT_SERVED, status_code=404)
    settings = await get_settings(request)
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
        # As the SDK serves it: body limit, no CORS (browsers are sent here, scripts never call it).
        Route(
            "/authorize",
            RequestBodyLimitMiddleware(request_response(authorize), DEFAULT_MAX_REQUEST_BODY_SIZE),
            methods=["GET", "POST"],
        ),
        Route("/token", _as_sdk_serves_it(token, ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route(
            "/.well-known/oauth-authorization-server",
            _as_sdk_serves_it(authorization_server_metadata, ["GET", "OPTIONS"], body_limit=False),
            methods=["GET", "OPTIONS"],
        ),
    ]
)
