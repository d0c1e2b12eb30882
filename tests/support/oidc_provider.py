"""A real OpenID Provider for tests: panva's oidc-provider in a node process on loopback.

`tests/e2e/node/oidc_provider.mjs` runs it; this module writes its config (keys made here with
joserfc, so tests can also sign tokens with the issuer's own key), starts it, waits for the line
it prints once listening, and gets tokens from it the way clients do (client credentials, or the
authorization-code flow with PKCE through its login form, driven by httpx).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from service.identity.oidc.login import CALLBACK_PATH
from tests.support.servers import bound_socket, port_of
from tests.support.service import RunningService, make_settings, run_service_on

NODE_DIR = Path(__file__).resolve().parents[1] / "e2e" / "node"
SCRIPT = NODE_DIR / "oidc_provider.mjs"

PAY_CLIENT_ID = "paid-mcp-payment-page"
PAY_CLIENT_SECRET = "payment-page-secret-at-least-32-characters"
CLI_CLIENT_ID = "mcp-test-cli"
CLI_CLIENT_SECRET = "mcp-test-cli-secret-at-least-32-characters"
CLI_REDIRECT_URI = "http://127.0.0.1:9/callback"  # never fetched: the code is read from the Location


def new_signing_key(kid: str) -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"})


@dataclass
class OidcProvider:
    issuer: str
    port: int
    keys: list[RSAKey]
    process: asyncio.subprocess.Process

    def sign(self, claims: dict[str, Any], *, key: RSAKey | None = None, typ: str = "at+jwt") -> str:
        """A JWT signed with the issuer's current key (or `key`), as the issuer would sign it."""
        signer = key or self.keys[0]
        header = {"alg": "RS256", "kid": signer.kid, "typ": typ}
        return jwt.encode(header, claims, signer)

    async def client_credentials_token(self, resource: str) -> str:
        async with httpx.AsyncClient(timeout=10.0) as http:
            response = await http.post(
                f"{self.issuer}/token",
                data={"grant_type": "client_credentials", "resource": resource, "scope": "mcp"},
                auth=(CLI_CLIENT_ID, CLI_CLIENT_SECRET),
            )
        assert response.status_code == 200, response.text
        return str(response.json()["access_token"])

    async def requests_served(self, method: str, path: str) -> int:
        """How many `method path` requests the provider has served so far, from anyone."""
        async with httpx.AsyncClient(timeout=10.0) as http:
            response = await http.get(f"{self.issuer}/_test/requests")
        response.raise_for_status()
        return int(response.json().get(f"{method} {path}", 0))

    async def token_requests(self) -> int:
        return await self.requests_served("POST", "/token")

    async def sign_in(self, authorization_url: str, username: str, redirect_uri: str) -> str:
        """Follows `authorization_url` through the provider's login form as `username`; the URL it
        then sends the browser to, on `redirect_uri` (not fetched)."""
        async with httpx.AsyncClient(timeout=10.0) as http:
            return await _follow_login(http, await http.get(authorization_url), username, redirect_uri)

    async def user_access_token(self, username: str, resource: str) -> str:
        """The authorization-code flow with PKCE, signing in as `username` on the provider's form."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        state = secrets.token_urlsafe(16)
        async with httpx.AsyncClient(timeout=10.0) as http:
            response = await http.get(
                f"{self.issuer}/auth",
                params={
                    "client_id": CLI_CLIENT_ID,
                    "response_type": "code",
                    "redirect_uri": CLI_REDIRECT_URI,
                    "scope": "openid mcp",
                    "resource": resource,
                    "state": state,
                    "code_challenge": challenge,
                    "code_challenge_method": "S256",
                },
            )
            location = await _follow_login(http, response, username, CLI_REDIRECT_URI)
            query = parse_qs(urlsplit(location).query)
            assert query.get("state") == [state], location
            assert "code" in query, location
            code = query["code"][0]
            token = await http.post(
                f"{self.issuer}/token",
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": CLI_REDIRECT_URI,
                    "code_verifier": verifier,
                    "resource": resource,
                },
                auth=(CLI_CLIENT_ID, CLI_CLIENT_SECRET),
            )
        assert token.status_code == 200, token.text
        return str(token.json()["access_token"])


async def _follow_login(
    http: httpx.AsyncClient, response: httpx.Response, username: str, redirect_uri: str
) -> str:
    """From the provider's answer to an authorization request, through its login form, to the
    redirect back to `redirect_uri`: that URL."""
    for _ in range(10):
        if response.status_code in (302, 303):
            location = urljoin(str(response.url), response.headers["location"])
            if location.startswith(redirect_uri):
                return location
            response = await http.get(location)
        elif response.status_code == 200 and 'name="login"' in response.text:
            response = await http.post(
                str(response.url), data={"prompt": "login", "login": username, "password": "any"}
            )
        else:
            raise AssertionError(f"unexpected {response.status_code} from the provider: {response.text}")
    raise AssertionError("the provider never redirected back")


def _clients(payment_redirect_uri: str | None) -> list[dict[str, Any]]:
    clients: list[dict[str, Any]] = [
        {
            "client_id": CLI_CLIENT_ID,
            "client_secret": CLI_CLIENT_SECRET,
            "redirect_uris": [CLI_REDIRECT_URI],
            "grant_types": ["authorization_code", "client_credentials"],
            "response_types": ["code"],
        }
    ]
    if payment_redirect_uri:
        clients.append(
            {
                "client_id": PAY_CLIENT_ID,
                "client_secret": PAY_CLIENT_SECRET,
                "redirect_uris": [payment_redirect_uri],
                "grant_types": ["authorization_code"],
                "response_types": ["code"],
            }
        )
    return clients


@asynccontextmanager
async def run_oidc_provider(
    tmp_path: Path,
    *,
    keys: list[RSAKey],
    payment_redirect_uri: str | None = None,
    port: int = 0,
    access_token_format: str = "jwt",
) -> AsyncIterator[OidcProvider]:
    """The provider, listening until the block ends. Fails (never skips) without node or its packages."""
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.fail("node or oidc-provider is missing: run `make node-deps`")
    config = tmp_path / f"oidc-provider-{secrets.token_hex(4)}.json"
    config.write_text(
        json.dumps(
            {
                "port": port,
                "keys": [key.as_dict(private=True) for key in keys],
                "clients": _clients(payment_redirect_uri),
                "accessTokenFormat": access_token_format,
            }
        )
    )
    process = await asyncio.create_subprocess_exec(
        node,
        str(SCRIPT),
        str(config),
        cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        if not line:
            raise AssertionError("oidc-provider exited: " + (await process.stderr.read()).decode())
        ready = json.loads(line)
        yield OidcProvider(issuer=ready["issuer"], port=ready["port"], keys=keys, process=process)
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()


@asynccontextmanager
async def run_service_with_provider(
    database_url: str,
    tmp_path: Path,
    *,
    keys: list[RSAKey],
    access_token_format: str = "jwt",
    **overrides: Any,
) -> AsyncIterator[tuple[OidcProvider, RunningService]]:
    """The provider, and our service configured to use it (its port is chosen first: the
    provider must know the payment page's redirect URI, the service the provider's issuer)."""
    sock = bound_socket()
    port = port_of(sock)
    redirect_uri = f"http://127.0.0.1:{port}{CALLBACK_PATH}"
    async with run_oidc_provider(
        tmp_path, keys=keys, payment_redirect_uri=redirect_uri, access_token_format=access_token_format
    ) as provider:
        settings = make_settings(
            database_url,
            port,
            oidc_issuer=provider.issuer,
            oidc_client_id=PAY_CLIENT_ID,
            oidc_client_secret=PAY_CLIENT_SECRET,
            **overrides,
        )
        async with run_service_on(settings, sock) as service:
            yield provider, service
