# Proves Q1+Q2: one FastAPI app mounting MCPServer.streamable_http_app() serves 2025-11-25 (mode="legacy") and
# 2026-07-28 (default mode) with bearer auth; tool sees token/era/session id/capabilities. Run: .venv/bin/python docs/dev/spikes/01_dual_era_fastapi.py
from __future__ import annotations

import contextlib
import json

import anyio
import httpx
from _harness import StaticTokenVerifier, auth_settings, client, serve
from fastapi import FastAPI
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import TextContent

mcp = MCPServer("paid-mcp", token_verifier=StaticTokenVerifier(), auth=auth_settings())


@mcp.tool()
async def whoami(ctx: Context) -> str:
    tok = get_access_token()  # contextvar set by the SDK's AuthContextMiddleware
    caps = ctx.client_capabilities  # ClientCapabilities | None
    el = caps.elicitation if caps else None
    return json.dumps({
        "sub": tok.subject if tok else None,
        "era": ctx.protocol_version,  # "2025-11-25" or "2026-07-28"
        "session_id": (ctx.headers or {}).get("mcp-session-id"),  # None on 2026-07-28
        "elicitation_url": bool(el and el.url is not None),
        "elicitation_form": bool(el and el.form is not None),
        "has_standalone_channel": ctx.session._connection.has_standalone_channel,  # private, for info only
    })


# streamable_http_app() must be called BEFORE session_manager is touched (it creates the manager).
mcp_asgi = mcp.streamable_http_app()  # default streamable_http_path="/mcp"; host="127.0.0.1" => localhost-only allowed_hosts!


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    async with mcp.session_manager.run():  # the mounted sub-app's own lifespan is NOT run by FastAPI
        yield


app = FastAPI(lifespan=lifespan)


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"ok": "yes"}


app.mount("/", mcp_asgi)  # mount LAST at "/": keeps /mcp and /.well-known/oauth-protected-resource/mcp at the root


async def main() -> None:
    async with serve(app) as base:
        for mode in ("legacy", "auto"):
            async with client(f"{base}/mcp", mode=mode) as c:
                res = await c.call_tool("whoami", {})
                assert isinstance(res.content[0], TextContent)
                print(f"mode={mode:6} negotiated={c.protocol_version} tool saw={res.content[0].text}")
        async with httpx.AsyncClient() as h:
            r = await h.get(f"{base}/healthz")
            print("fastapi route still works:", r.status_code, r.json())
            r = await h.post(f"{base}/mcp", json={})
            print("no token ->", r.status_code, "WWW-Authenticate:", r.headers.get("www-authenticate"))
            r = await h.get(f"{base}/.well-known/oauth-protected-resource/mcp")
            print("PRM ->", r.status_code, r.json())
            r = await h.post(f"{base}/mcp/", json={}, headers={"Authorization": "Bearer tok-alice"})
            print("POST /mcp/ (trailing slash) ->", r.status_code, r.headers.get("location"))
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
            r = await h.post(f"{base}/mcp", json=body, headers={"Authorization": "Bearer tok-alice",
                             "Host": "api.example.com", "Accept": "application/json, text/event-stream"})
            print("Host: api.example.com ->", r.status_code, r.text[:80])
        # Session ownership: alice's Mcp-Session-Id presented with bob's token -> 404 (as if unknown)
        async with httpx.AsyncClient(headers={"Accept": "application/json, text/event-stream"}) as h:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
                    "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
            r = await h.post(f"{base}/mcp", json=init, headers={"Authorization": "Bearer tok-alice"})
            sid = r.headers["mcp-session-id"]
            r2 = await h.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                              headers={"Authorization": "Bearer tok-bob", "mcp-session-id": sid,
                                       "mcp-protocol-version": "2025-11-25"})
            print("alice session used with bob token ->", r2.status_code)


anyio.run(main)
