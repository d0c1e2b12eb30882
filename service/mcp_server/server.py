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
from service.mcp_server.event_store import SessionEventStore, SessionScopes
from service.mcp_server.free_tools import register_free_tools
from service.mcp_server.jsonrpc_guard import JsonRpcGuard
from service.mcp_server.legacy_sessions import LegacySessionLimit, LegacySessions
from service.settings import Settings


def _auth(
    settings: Settings, oauth: DatabaseOAuthProvider, external: ExternalTokenVerifier | None
) -> dict[str, Any]:
    """Built-in server: the SDK serves /authorize; /token, /register, /revoke and the server
    metadata are ours (service/identity/oauth_routes.py, endpoints.py), so the SDK's registration
    and revocation routes are off. External issuer: only the protected-resource metadata, naming
    that issuer; our verifier checks the audience itself."""
    if external is not None:
        return {
            "token_verifier": external,
            "auth": AuthSettings.model_validate(
                {
                    "issuer_url": settings.oidc_issuer,
                    "resource_server_url": settings.mcp_resource_url,
                    "validate_token_resource": False,
                }
            ),
        }
    return {
        "auth_server_provider": oauth,
        "auth": AuthSettings.model_validate(
            {
                # Strings, not AnyHttpUrl: the SDK keeps a path-less issuer without a trailing slash.
                "issuer_url": settings.public_base_url,
                "resource_server_url": settings.mcp_resource_url,
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
        settings.mcp_server_name,
        tools=list(tools),
        version=__version__,
        instructions=(
            "Free and paid tools. A paid tool sends you to a payment page when you have no subscription."
        ),
        **_auth(settings, oauth, external),
        # Shared keys and a fixed audience let any replica open state another replica sealed.
        request_state_security=RequestStateSecurity(
            keys=settings.request_state_keys, audience=settings.mcp_server_name
        ),
        log_level=settings.log_level,
    )
    # Measured workarounds (service/compat/mcp.py), each off on an SDK version it was not checked on.
    if settings.mcp_sdk_workarounds:
        if not settings.mcp_otel_spans:
            drop_otel_spans(server)
        check_only_declared_headers(server)
    register_free_tools(server, sessions, callers)
    return server


MCP_PATH = "/mcp"


@dataclass(frozen=True)
class McpHttp:
    """What serves MCP over HTTP: the SDK's app for its OAuth and metadata routes, and `/mcp`."""

    app: Starlette  # the SDK's app: /authorize and the metadata documents (its `/mcp` is not routed to)
    endpoint: ASGIApp  # `/mcp`: the SDK's bearer authentication, our guards, the SDK's transport
    sessions: LegacySessions  # who holds which legacy session, capped per user
    events: SessionEventStore | None  # what resumable SSE streams keep; None when they are off


def event_store(settings: Settings) -> SessionEventStore | None:
    """The store that makes POST SSE streams resumable, when they are on and there are streams."""
    if not settings.mcp_resumable_streams or settings.mcp_json_response:
        return None
    return SessionEventStore(
        events_per_stream=settings.mcp_resumable_events_per_stream,
        streams_per_session=settings.mcp_resumable_streams_per_session,
        max_age_seconds=settings.mcp_resumable_seconds,
        max_bytes=settings.mcp_resumable_max_bytes,
    )


def build_mcp_app(server: MCPServer, settings: Settings, verifier: TokenVerifier) -> McpHttp:
    """The SDK's Streamable HTTP app (which also creates `server.session_manager`), and `/mcp` built
    from the SDK's public pieces with ours between them: behind authentication, the per-user
    session cap, then the JSON-RPC shape check (only a signed-in caller's body is parsed twice)."""
    events = event_store(settings)
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=settings.mcp_json_response,
        event_store=events,
        retry_interval=settings.mcp_sse_retry_ms if events is not None else None,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=settings.transport_allowed_hosts,
            allowed_origins=settings.transport_allowed_origins,
        ),
        host=settings.host,
        session_idle_timeout=settings.mcp_session_idle_seconds,
    )
    auth = server.settings.auth
    if auth is None:
        raise RuntimeError("the MCP server was built without authentication")
    sessions = LegacySessions(
        max_per_user=settings.max_legacy_sessions_per_user, idle_timeout=settings.mcp_session_idle_seconds
    )
    transport: ASGIApp = JsonRpcGuard(
        StreamableHTTPASGIApp(server.session_manager), max_depth=settings.max_json_depth
    )
    if events is not None:
        transport = SessionScopes(transport, events)
    endpoint = bearer_protected(LegacySessionLimit(transport, sessions), verifier, auth)
    return McpHttp(app=app, endpoint=endpoint, sessions=sessions, events=events)
