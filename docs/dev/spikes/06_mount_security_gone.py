# Proves Q1 gotchas: mount at "/mcp" with streamable_http_path="/" (307 /mcp -> /mcp/, Client follows it);
# TransportSecuritySettings for a real hostname (both eras); notifying a kept ServerSession after its client left.
# Run: .venv/bin/python docs/dev/spikes/06_mount_security_gone.py
from __future__ import annotations

import contextlib

import anyio
import httpx
from _harness import StaticTokenVerifier, auth_settings, client, serve
from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.session import ServerSession
from mcp.server.transport_security import TransportSecuritySettings

mcp = MCPServer("paid-mcp", token_verifier=StaticTokenVerifier(), auth=auth_settings(), log_level="WARNING")
KEPT: list[ServerSession] = []


@mcp.tool()
async def keep(ctx: Context) -> str:
    KEPT.append(ctx.session)
    return "kept"


sec = TransportSecuritySettings(allowed_hosts=["api.example.com", "127.0.0.1:*"],
                                allowed_origins=["https://api.example.com"])
sub = mcp.streamable_http_app(streamable_http_path="/", transport_security=sec)


@contextlib.asynccontextmanager
async def lifespan(app):
    async with mcp.session_manager.run():
        yield

app = FastAPI(lifespan=lifespan)
app.mount("/mcp", sub)


async def main() -> None:
    async with serve(app) as base:
        async with httpx.AsyncClient(headers={"Authorization": "Bearer tok-alice"}) as h:
            r = await h.post(f"{base}/mcp", json={})
            print("POST /mcp with mount('/mcp') ->", r.status_code, r.headers.get("location"))
            r = await h.get(f"{base}/.well-known/oauth-protected-resource/mcp")
            print("PRM at root now ->", r.status_code, "(it moved under /mcp/.well-known/...:",
                  (await h.get(f"{base}/mcp/.well-known/oauth-protected-resource/mcp")).status_code, ")")
            hdr = {"Accept": "application/json, text/event-stream", "Host": "api.example.com"}
            body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
                    "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
            for host in ("api.example.com", "evil.example.com"):
                r = await h.post(f"{base}/mcp/", json=body, headers={**hdr, "Host": host})
                print(f"legacy Host {host} ->", r.status_code)
                r = await h.post(f"{base}/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "server/discover",
                                 "params": {}}, headers={**hdr, "Host": host, "MCP-Protocol-Version": "2026-07-28",
                                                         "Mcp-Method": "server/discover"})
                print(f"modern Host {host} ->", r.status_code, r.text[:120])
            r = await h.post(f"{base}/mcp/", json=body, headers={**hdr, "Origin": "https://evil.example.com"})
            print("bad Origin ->", r.status_code)
        for url in (f"{base}/mcp", f"{base}/mcp/"):
            async with client(url, mode="legacy") as c:
                print(f"mcp.Client legacy at {url!r}:", (await c.call_tool("keep", {})).content[0].text)
        # both clients have exited (DELETE sent); the kept sessions now point at terminated connections
        for s in KEPT:
            try:
                await s.send_elicit_complete("el-gone")
                print("send_elicit_complete after client left: no exception")
            except Exception as e:  # noqa: BLE001
                print("send_elicit_complete after client left raised:", type(e).__name__, e)


anyio.run(main)
