"""Signing a browser in at the external issuer: authorization code + PKCE (S256) + state + nonce.

The payment page must prove that the person in the browser is the user the elicitation was made
for. With an external provider that proof is an OIDC login at the same issuer, as our confidential
client. The login's secrets (state, nonce, PKCE verifier, where to return) travel in a signed,
short-lived, HttpOnly cookie, so nothing is stored before the provider answers. The result is our
ordinary browser session cookie, and everything after it (CSRF, the payment page) is unchanged.

Each callback that would redeem a code costs an outbound token request, so before that request it
is rate-limited per client address and its state is consumed in the database: a state is redeemed
once, on any replica, however long its cookie stays valid.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
from itsdangerous import BadSignature, URLSafeTimedSerializer
from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwt import JWTClaimsRegistry
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from service.db.engine import SessionFactory
from service.identity.models import User
from service.identity.oidc import states
from service.identity.oidc.discovery import JwksCache, ProviderMetadata
from service.identity.oidc.identities import ExternalIdentities
from service.identity.oidc.tokens import LEEWAY_SECONDS
from service.identity.throttle import AddressRateLimiter, ip_key
from service.web.cookies import CookiePolicy

logger = logging.getLogger(__name__)

LOGIN_COOKIE = "oidc_login"
LOGIN_MAX_AGE_SECONDS = 600
CALLBACK_PATH = "/oidc/callback"
# Ours are 43 characters; a longer one cannot match the cookie's and is refused unread.
MAX_STATE_LENGTH = 128
# Codes are the provider's; some are long JWTs, but none this long.
MAX_CODE_LENGTH = 4096


class LoginFailed(Exception):
    """The sign-in at the provider did not prove anyone; the message is safe to show."""


class CallbackThrottled(Exception):
    """Too many sign-in answers from this client address; nothing was sent to the provider."""

    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(retry_after_seconds)
        self.retry_after_seconds = retry_after_seconds


@dataclass(frozen=True)
class SignedIn:
    user: User
    next_path: str


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


class OidcLogin:
    def __init__(
        self,
        http: httpx.AsyncClient,
        metadata: ProviderMetadata,
        keys: JwksCache,
        identities: ExternalIdentities,
        cookies: CookiePolicy,
        sessions: SessionFactory,
        callbacks: AddressRateLimiter,
        *,
        client_id: str,
        client_secret: str,
        redirect_uri: str,
        scopes: str,
        secret_key: str,
    ) -> None:
        self._http = http
        self._metadata = metadata
        self.keys = keys  # shared with the access-token verifier
        self._identities = identities
        self._cookies = cookies
        self._sessions = sessions
        self._callbacks = callbacks
        self._client_id = client_id
        self._auth = httpx.BasicAuth(client_id, client_secret)
        self._redirect_uri = redirect_uri
        self._scopes = scopes
        self._serializer = URLSafeTimedSerializer(secret_key, salt="oidc-login")

    def start(self, next_path: str) -> Response:
        """Send the browser to the provider; `next_path` is where it lands after signing in."""
        state, nonce, verifier = (secrets.token_urlsafe(32) for _ in range(3))
        params = {
            "response_type": "code",
            "client_id": self._client_id,
            "redirect_uri": self._redirect_uri,
            "scope": self._scopes,
            "state": state,
            "nonce": nonce,
            "code_challenge": _s256(verifier),
            "code_challenge_method": "S256",
        }
        endpoint = self._metadata.authorization_endpoint
        separator = "&" if "?" in endpoint else "?"
        response = RedirectResponse(endpoint + separator + urlencode(params), status_code=303)
        sealed = self._serializer.dumps(
            {"state": state, "nonce": nonce, "verifier": verifier, "next": next_path}
        )
        # Lax, not Strict: the provider's redirect back is a cross-site top-level navigation.
        self._cookies.set(response, LOGIN_COOKIE, sealed, max_age=LOGIN_MAX_AGE_SECONDS, samesite="lax")
        return response

    def forget(self, response: Response) -> None:
        self._cookies.clear(response, LOGIN_COOKIE)

    async def finish(self, request: Request, client_ip: str | None) -> SignedIn:
        """Checks the provider's answer, redeems the code and verifies the ID token.

        Raises `LoginFailed`, or `CallbackThrottled` when `client_ip` is over its rate."""
        try:
            pending: dict[str, str]
            pending, signed_at = self._serializer.loads(
                request.cookies.get(self._cookies.name(LOGIN_COOKIE), ""),
                max_age=LOGIN_MAX_AGE_SECONDS,
                return_timestamp=True,
            )
        except BadSignature as exc:
            raise LoginFailed("This sign-in has expired or was started in another browser.") from exc
        state = request.query_params.get("state", "")
        if len(state) > MAX_STATE_LENGTH or not hmac.compare_digest(
            state.encode(), pending["state"].encode()
        ):
            raise LoginFailed("This sign-in answer does not belong to the sign-in this browser started.")
        if "error" in request.query_params:
            raise LoginFailed("The identity provider did not sign you in.")
        code = request.query_params.get("code")
        if not code:
            raise LoginFailed("The identity provider sent no authorization code.")
        if len(code) > MAX_CODE_LENGTH:
            raise LoginFailed("The identity provider's authorization code is too long.")
        # Both before the token request: the rate bounds what a client address makes us send, and
        # consuming the state stops a replay of this cookie from sending anything at all.
        address = ip_key(client_ip or "unknown")
        if not self._callbacks.allow(address):
            raise CallbackThrottled(self._callbacks.retry_after(address))
        expires_at = signed_at + timedelta(seconds=LOGIN_MAX_AGE_SECONDS)
        if not await states.consume(self._sessions, state, expires_at):
            raise LoginFailed("This sign-in was already used. Start again to sign in.")
        claims = await self._redeem(code, pending["verifier"], pending["nonce"])
        user = await self._identities.user(self._metadata.issuer, str(claims["sub"]), claims)
        return SignedIn(user=user, next_path=pending["next"])

    async def _redeem(self, code: str, verifier: str, nonce: str) -> dict[str, Any]:
        try:
            response = await self._http.post(
                self._metadata.token_endpoint,
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": self._redirect_uri,
                    "code_verifier": verifier,
                },
                auth=self._auth,
            )
            response.raise_for_status()
            id_token = response.json()["id_token"]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            logger.warning("the identity provider refused the authorization code: %s", type(exc).__name__)
            raise LoginFailed("The identity provider did not accept the sign-in.") from exc
        return await self._verified_id_token(str(id_token), nonce)

    async def _verified_id_token(self, id_token: str, nonce: str) -> dict[str, Any]:
        """OIDC Core 3.1.3.7: signature, iss, aud contains us (azp when several), exp, nonce."""
        try:
            kid = jws.extract_compact(id_token.encode()).headers().get("kid")
            key = await self.keys.key_for(kid if isinstance(kid, str) else None)
            if key is None:
                raise LoginFailed("The ID token is signed with a key the provider does not publish.")
            decoded = jwt.decode(id_token, key, algorithms=list(self._metadata.algorithms))
            JWTClaimsRegistry(
                leeway=LEEWAY_SECONDS,
                iss={"essential": True, "value": self._metadata.issuer},
                aud={"essential": True, "values": [self._client_id]},
                exp={"essential": True},
                sub={"essential": True},
                nonce={"essential": True, "value": nonce},
            ).validate(decoded.claims)
        except (JoseError, ValueError) as exc:
            raise LoginFailed("The identity provider's ID token did not verify.") from exc
        claims = decoded.claims
        audience = claims["aud"]
        if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != self._client_id:
            raise LoginFailed("The ID token was issued to another client.")
        return claims
