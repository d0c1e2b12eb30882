"""The SDK's `TokenVerifier` for an external issuer: its tokens become our users' access tokens.

The `AccessToken` handed to the SDK carries OUR user id as `subject`, so the paywall, billing and
audit code see the same user ids as with the built-in server. Verified tokens are remembered
briefly (never past their expiry) so a warm tool call costs neither a signature check, an
introspection round trip, nor a database read. Personal access tokens (`mcp_pat_...`) made with
`python -m service tokens create` keep working next to the external provider.
"""

from __future__ import annotations

from typing import Protocol

from mcp.server.auth.provider import AccessToken

from service.identity.oauth_provider import DatabaseOAuthProvider
from service.identity.oidc.identities import ExternalIdentities
from service.identity.oidc.tokens import ExternalToken
from service.identity.secrets import digest
from service.identity.token_cache import TokenCache

OWN_TOKEN_PREFIX = "mcp_"  # noqa: S105 - our own secrets' prefix (service.identity.secrets.new_secret)
MAX_TOKEN_LENGTH = 16_384


class TokenValidator(Protocol):
    async def validate(self, token: str) -> ExternalToken | None: ...


class ExternalTokenVerifier:
    """Implements `mcp.server.auth.provider.TokenVerifier`."""

    def __init__(
        self,
        validator: TokenValidator,
        identities: ExternalIdentities,
        own_tokens: DatabaseOAuthProvider,
        *,
        audience: str,
        cache_seconds: float,
    ) -> None:
        self._validator = validator
        self._identities = identities
        self._own_tokens = own_tokens
        self._audience = audience
        self._cache: TokenCache[AccessToken] = TokenCache(ttl=cache_seconds)

    async def verify_token(self, token: str) -> AccessToken | None:
        if token.startswith(OWN_TOKEN_PREFIX):
            return await self._own_tokens.load_access_token(token)
        if len(token) > MAX_TOKEN_LENGTH:
            return None
        key = digest(token)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        external = await self._validator.validate(token)
        if external is None:
            return None
        user_id = await self._identities.user_id(external.issuer, external.subject, external.claims)
        access = AccessToken(
            token=token,
            client_id=external.client_id,
            scopes=external.scopes,
            expires_at=external.expires_at,
            resource=self._audience,
            subject=user_id,
            # The principal the SDK binds sessions and request_state to: the issuer and our user.
            claims={"iss": external.issuer, "external_sub": external.subject},
        )
        self._cache.put(key, "", access, expires_at=external.expires_at)
        return access
