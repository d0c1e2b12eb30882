"""Validating the issuer's access tokens: JWTs (RFC 9068) locally, or opaque ones by introspection (RFC 7662).

Both produce the same `ExternalToken`, the facts we act on: who (issuer, subject), for which client,
which scopes, until when. The audience must contain ours (RFC 8707 resource indicators): a token
minted for another API of the same issuer is not a token for us.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwt import JWTClaimsRegistry

from service.identity.oidc.discovery import JwksCache
from service.identity.oidc.introspection_limits import IntrospectionLimits
from service.identity.secrets import digest

logger = logging.getLogger(__name__)

LEEWAY_SECONDS = 30


@dataclass(frozen=True)
class ExternalToken:
    issuer: str
    subject: str
    client_id: str
    scopes: list[str]
    expires_at: int | None
    claims: dict[str, Any]


def _scopes(claims: dict[str, Any]) -> list[str]:
    scope = claims.get("scope")
    if isinstance(scope, str):
        return scope.split()
    scp = claims.get("scp")
    return [item for item in scp if isinstance(item, str)] if isinstance(scp, list) else []


def _client_id(claims: dict[str, Any]) -> str:
    for name in ("client_id", "azp"):
        value = claims.get(name)
        if isinstance(value, str) and value:
            return value
    return "external"


def _external_token(issuer: str, claims: dict[str, Any]) -> ExternalToken:
    """The facts we act on, from claims already checked (a verified JWT or an introspection answer)."""
    exp = claims.get("exp")
    return ExternalToken(
        issuer=issuer,
        subject=str(claims["sub"]),
        client_id=_client_id(claims),
        scopes=_scopes(claims),
        expires_at=int(exp) if isinstance(exp, int | float) else None,
        claims=claims,
    )


class JwtAccessTokens:
    """Signature (issuer's JWKS), `iss`, `aud`, `exp`/`nbf` with a small leeway, and a `sub`."""

    def __init__(self, keys: JwksCache, *, issuer: str, audience: str, algorithms: tuple[str, ...]) -> None:
        self._keys = keys
        self._issuer = issuer
        self._algorithms = list(algorithms)
        self._claims = JWTClaimsRegistry(
            leeway=LEEWAY_SECONDS,
            iss={"essential": True, "value": issuer},
            aud={"essential": True, "values": [audience]},
            exp={"essential": True},
            sub={"essential": True},
        )

    async def validate(self, token: str) -> ExternalToken | None:
        try:
            header = jws.extract_compact(token.encode()).headers()
        except (JoseError, ValueError):
            return None  # not a JWS at all
        if header.get("alg") not in self._algorithms:
            return None
        kid = header.get("kid")
        key = await self._keys.key_for(kid if isinstance(kid, str) else None)
        if key is None:
            return None
        try:
            decoded = jwt.decode(token, key, algorithms=self._algorithms)
            self._claims.validate(decoded.claims)
        except (JoseError, ValueError):
            return None
        return _external_token(self._issuer, decoded.claims)


@dataclass
class _Asking:
    """One introspection under way, which requests for the same token wait for."""

    done: anyio.Event = field(default_factory=anyio.Event)
    answered: bool = False
    result: ExternalToken | None = None


class IntrospectedTokens:
    """RFC 7662 with our client credentials; the answer must be active, unexpired and for our audience.

    Asking is bounded by `limits`: a refused token is not asked about again for a while, and each
    client address and the replica have a budget (past them `IntrospectionRefused` is raised).
    Requests for a token already being asked about wait for that answer instead of asking again, so
    a client's burst with a new token costs one introspection and one place in its budget; if the
    one asking is refused a place or cancelled before an answer, the others ask for themselves."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        endpoint: str,
        *,
        issuer: str,
        audience: str,
        client_id: str,
        client_secret: str,
        limits: IntrospectionLimits,
    ) -> None:
        self._http = http
        self._limits = limits
        self._endpoint = endpoint
        self._issuer = issuer
        self._audience = audience
        self._auth = httpx.BasicAuth(client_id, client_secret)
        # By the token's digest; an entry lives only while its introspection is under way.
        self._asking: dict[str, _Asking] = {}

    async def validate(self, token: str) -> ExternalToken | None:
        key = digest(token)
        while (asking := self._asking.get(key)) is not None:
            await asking.done.wait()
            if asking.answered:
                return asking.result
        if self._limits.was_refused(token):
            return None
        asking = self._asking[key] = _Asking()
        try:
            asking.result = await self._ask(token)
            asking.answered = True
            return asking.result
        finally:
            del self._asking[key]
            asking.done.set()

    async def _ask(self, token: str) -> ExternalToken | None:
        try:
            async with self._limits.admitted():
                response = await self._http.post(
                    self._endpoint, data={"token": token, "token_type_hint": "access_token"}, auth=self._auth
                )
            response.raise_for_status()
            answer = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            # Not remembered: the issuer, not the token, failed, and may answer the next request.
            logger.warning("token introspection at %s failed: %s", self._endpoint, type(exc).__name__)
            return None
        accepted = self._accepted(answer)
        if accepted is None:
            self._limits.refused(token)
        return accepted

    def _accepted(self, answer: object) -> ExternalToken | None:
        """The token an introspection `answer` describes, if it is one for us."""
        if not isinstance(answer, dict) or answer.get("active") is not True:
            return None
        try:
            # Introspection answers are trusted as they come from the issuer over TLS; the claim
            # checks are the same as for a JWT.
            JWTClaimsRegistry(
                leeway=LEEWAY_SECONDS,
                aud={"essential": True, "values": [self._audience]},
                exp={"essential": True},
                sub={"essential": True},
            ).validate(answer)
        except JoseError:
            return None
        issuer = answer.get("iss", self._issuer)
        if issuer != self._issuer:
            return None
        return _external_token(self._issuer, answer)
