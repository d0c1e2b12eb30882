"""Client authentication at /token and /revoke against hashed client secrets.

The SDK's `ClientAuthenticator` compares the presented secret with a stored plain-text one; we
keep only the secret's digest, so this subclass compares digests instead. Credentials are read
the way RFC 6749 §2.3.1 and the SDK read them.
"""

from __future__ import annotations

import base64
import binascii
import time
from urllib.parse import unquote

from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.shared.auth import OAuthClientInformationFull
from starlette.requests import Request

from service.identity.oauth_provider import DatabaseOAuthProvider


def _basic_credentials(header: str, client_id: str) -> str:
    if not header.startswith("Basic "):
        raise AuthenticationError("Missing or invalid Basic authentication in Authorization header")
    try:
        decoded = base64.b64decode(header[6:], validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise AuthenticationError("Invalid Basic authentication header") from exc
    if ":" not in decoded:
        raise AuthenticationError("Invalid Basic authentication header")
    basic_id, secret = decoded.split(":", 1)
    if unquote(basic_id) != client_id:
        raise AuthenticationError("Client ID mismatch in Basic auth")
    return unquote(secret)


class HashedSecretAuthenticator(ClientAuthenticator):
    def __init__(self, provider: DatabaseOAuthProvider) -> None:
        super().__init__(provider)
        self._clients = provider

    async def authenticate_request(self, request: Request) -> OAuthClientInformationFull:
        # /token and /revoke have read the form with `read_form` (refusing one it cannot read), so
        # this returns the form Starlette kept.
        form = await request.form()
        client_id = form.get("client_id")
        if not isinstance(client_id, str) or not client_id:
            raise AuthenticationError("Missing client_id")
        client = await self._clients.get_client(client_id)
        if client is None:
            raise AuthenticationError("Invalid client_id")
        method = client.token_endpoint_auth_method
        if method == "none":
            return client
        if method == "client_secret_basic":
            secret: str | None = _basic_credentials(request.headers.get("Authorization", ""), client_id)
        elif method == "client_secret_post":
            posted = form.get("client_secret")
            secret = posted if isinstance(posted, str) else None
        else:
            raise AuthenticationError(f"Unsupported auth method: {method}")
        if not secret:
            raise AuthenticationError("Client secret is required")
        if not await self._clients.client_secret_matches(client_id, secret):
            raise AuthenticationError("Invalid client_secret")
        if client.client_secret_expires_at and client.client_secret_expires_at < int(time.time()):
            raise AuthenticationError("Client secret has expired")
        return client
