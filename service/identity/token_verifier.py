"""The `TokenVerifier` `/mcp` checks bearer tokens with: our token store, through its cache."""

from __future__ import annotations

from mcp.server.auth.provider import AccessToken, TokenVerifier

from service.identity.oauth_provider import DatabaseOAuthProvider

# Our tokens are a few dozen characters; anything much longer is refused without a lookup.
MAX_TOKEN_LENGTH = 512


class StoredTokenVerifier(TokenVerifier):
    """OAuth and personal access tokens, as `DatabaseOAuthProvider.load_access_token` finds them: a
    verified token is remembered for `TOKEN_CACHE_SECONDS` at most, and forgotten as soon as its
    grant is revoked here or, through the completion bus, on another replica."""

    def __init__(self, provider: DatabaseOAuthProvider) -> None:
        self._provider = provider

    async def verify_token(self, token: str) -> AccessToken | None:
        if not token or len(token) > MAX_TOKEN_LENGTH:
            return None
        return await self._provider.load_access_token(token)
