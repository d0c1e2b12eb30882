"""Builds the `MCPServer` and its Streamable HTTP app for one runtime."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcp.server import MCPServer
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver.tools import Tool
from mcp.server.request_state import RequestStateSecurity
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.types import ASGIApp

from service import __version__
from service.compat.mcp import check_only_declared_headers, drop_otel_spans
from service.db.engine import SessionFactory
from service.identity.oauth_provider import DatabaseOAuthProvider
from service.identity.oidc.verifier import ExternalTokenVerifier
from service.mcp_server.bearer import bearer_protected
from service.mcp_server.caller import CallerSource
from service.mcp_server.event_store import NoResumption, SessionEventStore, SessionScopes
from service.mcp_server.explained_refusals import ExplainedRefusals
from service.mcp_server.free_tools import register_free_tools
from service.mcp_server.jsonrpc_guard import JsonRpcGuard
from service.mcp_server.legacy_sessions import LegacySessionLimit, LegacySessions
from service.mcp_server.repeated_headers import RepeatedHeaderRefusal
from service.mcp_server.requests_in_flight import HandlingInFlight, RequestsInFlight, UserRequestLimit
from service.mcp_server.unknown_prompts import UnknownPrompts
from service.settings import McpSettings, Settings
from service.web.client_address import ClientAddresses


def _auth(
    settings: Settings, oauth: DatabaseOAuthProvider, external: ExternalTokenVerifier | None
) -> dict[str, Any]:
    """Built-in server: /authorize, /token, /register, /revoke and the server metadata are ours
    (service/identity/oauth_routes.py, endpoints.py; /authorize wraps the SDK's handler), so the
    SDK's registration and revocation routes are off. External issuer: only the protected-resource
    metadata, naming that issuer; our verifier checks the audience itself."""
    if external is not None:
        return {
            "token_verifier": external,
            "auth": AuthSettings.model_validate(
                {
                    "issuer_url": settings.oidc.issuer,
                    "resource_server_url": settings.http.mcp_resource_url,
                    "validate_token_resource": False,
                }
            ),
        }
    return {
        "auth_server_provider": oauth,
        "auth": AuthSettings.model_validate(
            {
                # Strings, not AnyHttpUrl: the SDK keeps a path-less issuer without a trailing slash.
                "issuer_url": settings.http.public_base_url,
                "resource_server_url": settings.http.mcp_resource_url,
                "validate_token_resource": True,
                "client_registration_options": ClientRegistrationOptions(enabled=False),
                "revocation_options": RevocationOptions(enabled=False),
            }
        ),
    }


def build_mcp_server(
    settings: Settings,
    oauth: DatabaseOAuthProvider,
    sessions: SessionFactory,
    callers: CallerSource,
    external: ExternalTokenVerifier | None = None,
    tools: Sequence[Tool] = (),
) -> MCPServer:
    """`tools`: prebuilt registry entries (the gateway's upstream tools), served next to ours."""
    server: MCPServer = MCPServer(
        settings.mcp.server_name,
        tools=list(tools),
        version=__version__,
        instructions=(
            "Free and paid tools. A paid tool sends you to a payment page when you have no subscription."
        ),
        **_auth(settings, oauth, external),
        # Shared keys and a fixed audience let any replica open state another replica sealed.
        request_state_security=RequestStateSecurity(
            keys=settings.mcp.request_state_keys, audience=settings.mcp.server_name
        ),
        log_level=settings.observability.log_level,
    )
    # Measured workarounds (service/compat/mcp.py), each off on an SDK version it was not checked on.
    if settings.mcp.sdk_workarounds:
        if not settings.mcp.otel_spans:
            drop_otel_spans(server)
        check_only_declared_headers(server)
    register_free_tools(server, sessions, callers)
    server.middleware.append(UnknownPrompts(server))
    return server


MCP_PATH = "/mcp"


@dataclass(frozen=True)
class McpHttp:
    """What serves MCP over HTTP: the SDK's app for its OAuth and metadata routes, and `/mcp`."""

    app: Starlette  # the SDK's app: /authorize and the metadata documents (its `/mcp` is not routed to)
    endpoint: ASGIApp  # `/mcp`: the SDK's bearer authentication, our guards, the SDK's transport
    sessions: LegacySessions  # who holds which legacy session, capped per user
    in_flight: RequestsInFlight  # each user's requests under way, capped per user
    events: SessionEventStore | None  # what resumable SSE streams keep; None when they are off


def event_store(mcp: McpSettings) -> SessionEventStore | None:
    """The store that makes POST SSE streams resumable, when they are on and there are streams."""
    if not mcp.resumable_streams or mcp.json_response:
        return None
    return SessionEventStore(
        events_per_stream=mcp.resumable_events_per_stream,
        streams_per_session=mcp.resumable_streams_per_session,
        max_age_seconds=mcp.resumable_seconds,
        max_bytes=mcp.resumable_max_bytes,
    )


def build_mcp_app(
    server: MCPServer, settings: Settings, verifier: TokenVerifier, addresses: ClientAddresses
) -> McpHttp:
    """The SDK's Streamable HTTP app (which also creates `server.session_manager`), and `/mcp` built
    from the SDK's public pieces with ours between them: behind authentication, the refusal of
    repeated routing headers, the per-user caps on requests in flight and on sessions, then the
    JSON-RPC shape check (only a signed-in caller's body is parsed twice)."""
    events = event_store(settings.mcp)
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=settings.mcp.json_response,
        event_store=events,
        retry_interval=settings.mcp.sse_retry_ms if events is not None else None,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=settings.transport_allowed_hosts,
            allowed_origins=settings.transport_allowed_origins,
        ),
        host=settings.http.host,
        session_idle_timeout=settings.mcp.session_idle_seconds,
    )
    auth = server.settings.auth
    if auth is None:
        raise RuntimeError("the MCP server was built without authentication")
    sessions = LegacySessions(
        max_per_user=settings.mcp.max_legacy_sessions_per_user, idle_timeout=settings.mcp.session_idle_seconds
    )
    transport: ASGIApp = JsonRpcGuard(
        ExplainedRefusals(
            StreamableHTTPASGIApp(server.session_manager), json_response=settings.mcp.json_response
        ),
        max_depth=settings.http.max_json_depth,
    )
    transport = SessionScopes(transport, events) if events is not None else NoResumption(transport)
    in_flight = RequestsInFlight(max_per_user=settings.mcp.max_requests_in_flight_per_user)
    # Outermost, so a call's place stays taken for all of its handling, however long it outlives the POST.
    server.middleware.insert(0, HandlingInFlight())
    # Repeated routing headers are refused first: the layers after it and the SDK see one of each.
    limits = UserRequestLimit(LegacySessionLimit(transport, sessions), in_flight)
    # Only introspection budgets by client address: other verifiers need no address per request.
    budgeted = addresses if settings.oidc.introspection else None
    endpoint = bearer_protected(RepeatedHeaderRefusal(limits), verifier, auth, budgeted)
    return McpHttp(app=app, endpoint=endpoint, sessions=sessions, in_flight=in_flight, events=events)
