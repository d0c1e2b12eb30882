# Proves Q7: mcp.client.auth.OAuthClientProvider does DCR + authorization code + PKCE against the SDK's auth routes
# (MCPServer(auth_server_provider=...)); a test drives our login form with plain httpx instead of a browser.
# Run: .venv/bin/python docs/dev/spikes/04_oauth_client_flow.py
from __future__ import annotations

import contextlib
import secrets
import time
from urllib.parse import parse_qs, urlparse

import anyio
import httpx
import httpx2
from _harness import free_port, serve
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, AuthorizationCode, AuthorizationParams, RefreshToken, construct_redirect_uri
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse
from starlette.routing import Route

PORT = free_port()
BASE = f"http://127.0.0.1:{PORT}"


class MemoryProvider:  # OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]
    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.pending: dict[str, tuple[OAuthClientInformationFull, AuthorizationParams]] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.tokens: dict[str, AccessToken] = {}

    async def get_client(self, client_id: str): return self.clients.get(client_id)
    async def register_client(self, client_info: OAuthClientInformationFull): self.clients[client_info.client_id] = client_info

    async def authorize(self, client, params: AuthorizationParams) -> str:
        txn = secrets.token_urlsafe(16)
        self.pending[txn] = (client, params)
        return f"{BASE}/login?txn={txn}"  # /authorize answers 302 here; our page authenticates the user

    async def complete_login(self, txn: str, user: str) -> str:
        client, p = self.pending.pop(txn)
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(code=code, scopes=p.scopes or ["mcp"], expires_at=time.time() + 300,
            client_id=client.client_id, code_challenge=p.code_challenge, redirect_uri=p.redirect_uri,
            redirect_uri_provided_explicitly=p.redirect_uri_provided_explicitly, resource=p.resource, subject=user)
        return construct_redirect_uri(str(p.redirect_uri), code=code, state=p.state, iss=BASE)

    async def load_authorization_code(self, client, code): return self.codes.get(code)

    async def exchange_authorization_code(self, client, ac: AuthorizationCode) -> OAuthToken:
        del self.codes[ac.code]
        tok = secrets.token_urlsafe(32)
        self.tokens[tok] = AccessToken(token=tok, client_id=client.client_id, scopes=ac.scopes,
                                       expires_at=int(time.time()) + 3600, resource=ac.resource, subject=ac.subject)
        return OAuthToken(access_token=tok, token_type="Bearer", expires_in=3600, scope=" ".join(ac.scopes))

    async def load_access_token(self, token: str): return self.tokens.get(token)
    async def load_refresh_token(self, client, refresh_token): return None
    async def exchange_refresh_token(self, client, refresh_token: RefreshToken, scopes): raise NotImplementedError
    async def revoke_token(self, token): pass


provider = MemoryProvider()
mcp = MCPServer("paid-mcp", auth_server_provider=provider, log_level="WARNING", auth=AuthSettings(
    issuer_url=BASE, resource_server_url=f"{BASE}/mcp", validate_token_resource=True, required_scopes=["mcp"],
    client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=["mcp"], default_scopes=["mcp"])))


@mcp.tool()
async def whoami() -> str:
    return get_access_token().subject or "?"  # type: ignore[union-attr]


async def login(request: Request):  # the service's own login page (GET form, POST credentials)
    if request.method == "GET":
        return HTMLResponse(f'<form method=post><input name=user><input name=password type=password></form>')
    form = await request.form()
    if form["password"] != "pw":
        return HTMLResponse("bad credentials", status_code=401)
    return RedirectResponse(await provider.complete_login(request.query_params["txn"], str(form["user"])), 302)


@contextlib.asynccontextmanager
async def lifespan(app):
    async with mcp.session_manager.run():
        yield

app = Starlette(lifespan=lifespan, routes=[Route("/login", login, methods=["GET", "POST"])])
app.mount("/", mcp.streamable_http_app())  # /mcp plus /authorize /token /register /.well-known/* from the SDK


class MemoryStorage(TokenStorage):  # TokenStorage Protocol: 4 async methods
    def __init__(self): self.tokens, self.client = None, None
    async def get_tokens(self): return self.tokens
    async def set_tokens(self, tokens: OAuthToken): self.tokens = tokens
    async def get_client_info(self): return self.client
    async def set_client_info(self, client_info: OAuthClientInformationFull): self.client = client_info


async def main() -> None:
    landed: dict[str, str] = {}

    async def redirect_handler(authorization_url: str) -> None:  # "open the browser": here, plain HTTP
        async with httpx.AsyncClient(follow_redirects=False) as h:
            r = await h.get(authorization_url)  # SDK /authorize -> 302 to our /login
            assert r.status_code == 302, r.text
            r = await h.post(r.headers["location"], data={"user": "alice", "password": "pw"})
            landed["url"] = r.headers["location"]  # redirect_uri?code=...&state=...&iss=...

    async def callback_handler() -> AuthorizationCodeResult:  # "wait for the redirect to the local callback"
        q = {k: v[0] for k, v in parse_qs(urlparse(landed["url"]).query).items()}
        return AuthorizationCodeResult(code=q["code"], state=q.get("state"), iss=q.get("iss"))

    storage = MemoryStorage()
    auth = OAuthClientProvider(
        server_url=f"{BASE}/mcp",
        client_metadata=OAuthClientMetadata(client_name="spike", redirect_uris=["http://127.0.0.1:9/callback"],
            grant_types=["authorization_code", "refresh_token"], response_types=["code"], scope="mcp",
            token_endpoint_auth_method="none"),
        storage=storage, redirect_handler=redirect_handler, callback_handler=callback_handler)
    async with serve(app, port=PORT):
        for mode in ("legacy", "auto"):
            http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30, read=300))
            async with Client(streamable_http_client(f"{BASE}/mcp", http_client=http), mode=mode) as c:
                r = await c.call_tool("whoami", {})
                print(f"mode={mode} era={c.protocol_version} whoami -> {r.content[0].text}")
            await http.aclose()
        print("stored client_id:", storage.client.client_id[:8] + "...", "token:", storage.tokens.access_token[:8] + "...",
              "| logins performed:", len(provider.tokens))


anyio.run(main)
