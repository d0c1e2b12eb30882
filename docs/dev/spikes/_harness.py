# Shared helpers for the spikes (not a spike itself): run an ASGI app under a real uvicorn on 127.0.0.1:<free port>,
# a static bearer-token verifier, and an authenticated mcp.Client factory.
from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import uvicorn
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

TOKENS = {t: t[4:] for t in ("tok-alice", "tok-bob", "tok-carol", "tok-dave", "tok-erin", "tok-frank")}  # bearer token -> user (sub)


class StaticTokenVerifier:
    """Implements mcp.server.auth.provider.TokenVerifier (a Protocol: just `async verify_token`)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        sub = TOKENS.get(token)
        if sub is None:
            return None
        return AccessToken(token=token, client_id="spike-client", scopes=["mcp"], subject=sub)


def auth_settings(base: str = "http://127.0.0.1") -> AuthSettings:
    return AuthSettings(
        issuer_url=base,  # type: ignore[arg-type]
        resource_server_url=f"{base}/mcp",  # type: ignore[arg-type]
        validate_token_resource=False,  # our verifier checks audience itself (silences the 3.0 warning)
        required_scopes=["mcp"],
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def serve(app: Any, port: int | None = None) -> AsyncIterator[str]:
    """Run `app` with uvicorn (lifespan on) and yield its base URL."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        while not server.started:
            await anyio.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True


def client(url: str, token: str | None = "tok-alice", **kw: Any) -> Client:
    """mcp.Client over Streamable HTTP with an Authorization header (the SDK uses httpx2, not httpx)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # Same timeouts as the SDK's own default client (mcp.shared._httpx_utils.create_mcp_http_client, private).
    # streamable_http_client does NOT close an http_client it did not create; fine for a spike.
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))
    return Client(streamable_http_client(url, http_client=http), **kw)
