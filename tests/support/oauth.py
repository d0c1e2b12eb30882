"""Raw-HTTP steps of the built-in OAuth server's flows: register, authorize, exchange, refresh."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.support.browserless import sign_in_and_allow
from tests.support.service import DEFAULT_PASSWORD, RunningService

REDIRECT_URI = "http://127.0.0.1:9/callback"  # never contacted: the test reads the Location header
# Far below the 30 s token cache, so only a revocation message explains a refusal in time.
REVOCATION_DEADLINE_SECONDS = 5.0
# A multipart form whose part charset (idna) makes Starlette's decoding raise a bare UnicodeError.
UNDECODABLE_MULTIPART = {"Content-Type": "multipart/form-data; boundary=xx; charset=idna"}
UNDECODABLE_FORM = b'--xx\r\nContent-Disposition: form-data; name="client_id"\r\n\r\nxn--zz\r\n--xx--\r\n'


def query_of(url: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


async def register(http: httpx.AsyncClient, **metadata: Any) -> dict[str, Any]:
    """Registers a public client (unless `metadata` says otherwise); asserts it was accepted."""
    response = await http.post("/register", json=client_metadata(**metadata))
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def client_metadata(**metadata: Any) -> dict[str, Any]:
    return {
        "client_name": "step by step",
        "redirect_uris": [REDIRECT_URI],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **metadata,
    }


async def authorize(
    service: RunningService,
    http: httpx.AsyncClient,
    client_id: str,
    challenge: str,
    redirect_uri: str = REDIRECT_URI,
    **extra: str,
) -> httpx.Response:
    return await http.get(
        "/authorize",
        params={
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "xyz",
            "resource": service.mcp_url,
            **extra,
        },
    )


async def exchange_code(
    http: httpx.AsyncClient,
    client_id: str,
    code: str,
    verifier: str,
    redirect_uri: str = REDIRECT_URI,
    **credentials: str,
) -> httpx.Response:
    return await http.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "client_id": client_id,
            "code_verifier": verifier,
            **credentials,
        },
    )


async def refresh_with(http: httpx.AsyncClient, client_id: str, refresh_token: str) -> httpx.Response:
    return await http.post(
        "/token", data={"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id}
    )


async def whoami_status(service: RunningService, access_token: str) -> int:
    async with service.http() as http:
        response = await http.post(
            "/mcp",
            headers={
                "Authorization": f"Bearer {access_token}",
                "Accept": "application/json, text/event-stream",
            },
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "probe", "version": "1"},
                },
            },
        )
    return response.status_code


async def signed_in_code(
    service: RunningService, http: httpx.AsyncClient, username: str
) -> tuple[str, str, str]:
    """Registers a public client, signs `username` in and approves it: (client id, code, verifier)."""
    verifier, challenge = pkce_pair()
    client = await register(http)
    to_login = await authorize(service, http, client["client_id"], challenge)
    assert to_login.status_code == 302, to_login.text
    done = await sign_in_and_allow(http, to_login.headers["location"], username, DEFAULT_PASSWORD)
    assert done.status_code == 303, done.text
    return client["client_id"], query_of(done.headers["location"])["code"], verifier


async def authorized_tokens(
    service: RunningService, http: httpx.AsyncClient, username: str
) -> tuple[str, dict[str, Any]]:
    """A fresh grant for `username`: (client id, the token response)."""
    client_id, code, verifier = await signed_in_code(service, http, username)
    exchanged = await exchange_code(http, client_id, code, verifier)
    assert exchanged.status_code == 200, exchanged.text
    tokens: dict[str, Any] = exchanged.json()
    return client_id, tokens


async def refused_within_deadline(replica: RunningService, access_token: str) -> bool:
    """Polls the replica until it refuses the token or the deadline passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REVOCATION_DEADLINE_SECONDS
    while loop.time() < deadline:
        if await whoami_status(replica, access_token) == 401:
            return True
    return False
