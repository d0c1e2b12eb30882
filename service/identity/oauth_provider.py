"""The built-in OAuth 2.1 authorization server, as the SDK's provider protocol wants it.

The SDK owns the HTTP side (metadata, registration, /authorize, /token, /revoke, PKCE checks);
this class owns storage. `/authorize` hands the browser to our login page with the request
sealed in the URL, so nothing is stored until a user has actually logged in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.provider import (
    AuthorizationCode as SDKAuthorizationCode,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from service.db.engine import SessionFactory
from service.db.metadata import utcnow
from service.identity import service as identity
from service.identity.models import AuthorizationCode, OAuthClient, Token, User
from service.identity.secrets import digest, new_id, new_secret
from service.identity.token_cache import TokenCache

AUTHORIZE_REQUEST_MAX_AGE_SECONDS = 900


class StoredAuthorizationCode(SDKAuthorizationCode):
    user_id: str


class StoredRefreshToken(RefreshToken):
    grant_id: str
    user_id: str


class StoredAccessToken(AccessToken):
    grant_id: str
    token_id: str


@dataclass(frozen=True)
class PendingAuthorization:
    """An /authorize request waiting for the user to log in; travels signed in the login URL."""

    client_id: str
    client_name: str | None
    params: AuthorizationParams


def _epoch(token: Token) -> int | None:
    return int(token.expires_at.timestamp()) if token.expires_at else None


class DatabaseOAuthProvider:
    """Implements `mcp.server.auth.provider.OAuthAuthorizationServerProvider` over our tables."""

    def __init__(
        self,
        sessions: SessionFactory,
        *,
        public_base_url: str,
        resource_url: str,
        secret_key: str,
        access_token_ttl: timedelta,
        refresh_token_ttl: timedelta,
        code_ttl: timedelta,
        token_cache_seconds: float = 0.0,
    ) -> None:
        self._sessions = sessions
        self._public_base_url = public_base_url
        self._resource_url = resource_url.rstrip("/")
        self._serializer = URLSafeTimedSerializer(secret_key, salt="oauth-authorize-request")
        self._access_ttl = access_token_ttl
        self._refresh_ttl = refresh_token_ttl
        self._code_ttl = code_ttl
        self._verified: TokenCache[StoredAccessToken] = TokenCache(ttl=token_cache_seconds)

    # -- clients ---------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        async with self._sessions() as session:
            row = await session.get(OAuthClient, client_id)
        return OAuthClientInformationFull.model_validate_json(row.info_json) if row else None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        async with self._sessions() as session, session.begin():
            session.add(OAuthClient(client_id=client_info.client_id, info_json=client_info.model_dump_json()))

    # -- authorization ---------------------------------------------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if params.resource is not None and params.resource.rstrip("/") != self._resource_url:
            raise AuthorizeError("invalid_target", "this server only issues tokens for its own MCP endpoint")
        params = params.model_copy(update={"resource": self._resource_url})
        sealed = self._serializer.dumps(
            {
                "client_id": client.client_id,
                "client_name": client.client_name,
                "params": params.model_dump(mode="json"),
            }
        )
        return f"{self._public_base_url}/login?authz={sealed}"

    def open_pending(self, sealed: str) -> PendingAuthorization | None:
        """The authorization request sealed by `authorize`, or None if forged or too old."""
        try:
            data: dict[str, Any] = self._serializer.loads(sealed, max_age=AUTHORIZE_REQUEST_MAX_AGE_SECONDS)
        except BadSignature:
            return None
        return PendingAuthorization(
            client_id=data["client_id"],
            client_name=data.get("client_name"),
            params=AuthorizationParams.model_validate(data["params"]),
        )

    async def complete_authorization(
        self, session: AsyncSession, pending: PendingAuthorization, user: User
    ) -> str:
        """Mint a code for the logged-in user in the caller's transaction; returns the redirect URL."""
        code = new_secret("mcp_code")
        params = pending.params
        session.add(
            AuthorizationCode(
                code_hash=digest(code),
                client_id=pending.client_id,
                user_id=user.id,
                scopes=" ".join(params.scopes or []),
                code_challenge=params.code_challenge,
                redirect_uri=str(params.redirect_uri),
                redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
                resource=params.resource,
                expires_at=utcnow() + self._code_ttl,
            )
        )
        return construct_redirect_uri(
            str(params.redirect_uri), code=code, state=params.state, iss=self._public_base_url
        )

    def denied_redirect(self, pending: PendingAuthorization) -> str:
        return construct_redirect_uri(
            str(pending.params.redirect_uri),
            error="access_denied",
            state=pending.params.state,
            iss=self._public_base_url,
        )

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> StoredAuthorizationCode | None:
        async with self._sessions() as session:
            row = await session.get(AuthorizationCode, digest(authorization_code))
        if row is None or row.client_id != client.client_id:
            return None
        return StoredAuthorizationCode(
            code=authorization_code,
            scopes=row.scopes.split(),
            expires_at=row.expires_at.timestamp(),
            client_id=row.client_id,
            code_challenge=row.code_challenge,
            redirect_uri=AnyUrl(row.redirect_uri),
            redirect_uri_provided_explicitly=row.redirect_uri_provided_explicitly,
            resource=row.resource,
            subject=row.user_id,
            user_id=row.user_id,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: StoredAuthorizationCode
    ) -> OAuthToken:
        assert client.client_id is not None
        async with self._sessions() as session, session.begin():
            row = await session.get(AuthorizationCode, digest(authorization_code.code))
            if row is None:
                # Raced with another exchange of the same code: single use wins.
                raise TokenError("invalid_grant", "authorization code already used")
            await session.delete(row)
            return await self._issue_pair(
                session,
                client_id=client.client_id,
                user_id=authorization_code.user_id,
                grant_id=new_id("grt"),
                scopes=authorization_code.scopes,
                resource=authorization_code.resource,
            )

    # -- refresh ---------------------------------------------------------------------------

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> StoredRefreshToken | None:
        async with self._sessions() as session, session.begin():
            token = await identity.find_live_token(session, refresh_token, ("refresh",))
            if token is None:
                await self._revoke_grant_on_reuse(session, refresh_token)
                return None
        if token.client_id != client.client_id:
            return None
        return StoredRefreshToken(
            token=refresh_token,
            client_id=token.client_id,
            scopes=token.scopes.split(),
            expires_at=_epoch(token),
            resource=token.resource,
            subject=token.user_id,
            grant_id=token.grant_id,
            user_id=token.user_id,
        )

    async def _revoke_grant_on_reuse(self, session: AsyncSession, secret: str) -> None:
        """A rotated-away refresh token presented again means it leaked: end the whole grant."""
        result = await session.exec(select(Token).where(Token.token_hash == digest(secret)))
        stale = result.first()
        if stale is not None and stale.kind == "refresh" and stale.revoked_at is not None:
            await identity.revoke_grant(session, stale.grant_id)
            self._verified.forget_grant(stale.grant_id)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: StoredRefreshToken, scopes: list[str]
    ) -> OAuthToken:
        assert client.client_id is not None
        async with self._sessions() as session, session.begin():
            current = await identity.find_live_token(session, refresh_token.token, ("refresh",))
            if current is None:
                raise TokenError("invalid_grant", "refresh token is no longer valid")
            current.revoked_at = utcnow()
            session.add(current)
            return await self._issue_pair(
                session,
                client_id=client.client_id,
                user_id=refresh_token.user_id,
                grant_id=refresh_token.grant_id,
                scopes=scopes or refresh_token.scopes,
                resource=refresh_token.resource,
            )

    async def _issue_pair(
        self,
        session: AsyncSession,
        *,
        client_id: str,
        user_id: str,
        grant_id: str,
        scopes: list[str],
        resource: str | None,
    ) -> OAuthToken:
        common: dict[str, Any] = {
            "user_id": user_id,
            "client_id": client_id,
            "grant_id": grant_id,
            "scopes": scopes,
            "resource": resource,
        }
        access = await identity.issue_token(session, kind="access", ttl=self._access_ttl, **common)
        refresh = await identity.issue_token(session, kind="refresh", ttl=self._refresh_ttl, **common)
        return OAuthToken(
            access_token=access.secret,
            token_type="Bearer",  # noqa: S106 - the token type, not a secret
            expires_in=int(self._access_ttl.total_seconds()),
            scope=" ".join(scopes) or None,
            refresh_token=refresh.secret,
        )

    # -- access tokens ---------------------------------------------------------------------

    async def load_access_token(self, token: str) -> StoredAccessToken | None:
        """Verifies OAuth access tokens and personal access tokens alike."""
        key = digest(token)
        cached = self._verified.get(key)
        if cached is not None:
            return cached
        async with self._sessions() as session:
            row = await identity.find_live_token(session, token, ("access", "personal"))
        if row is None:
            return None
        verified = StoredAccessToken(
            token=token,
            client_id=row.client_id,
            scopes=row.scopes.split(),
            expires_at=_epoch(row),
            resource=row.resource,
            subject=row.user_id,
            grant_id=row.grant_id,
            token_id=row.id,
        )
        self._verified.put(
            key, row.grant_id, verified, expires_at=row.expires_at.timestamp() if row.expires_at else None
        )
        return verified

    async def revoke_token(self, token: StoredAccessToken | StoredRefreshToken) -> None:
        async with self._sessions() as session, session.begin():
            await identity.revoke_grant(session, token.grant_id)
        self._verified.forget_grant(token.grant_id)

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: Any
    ) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "identity assertions are not enabled")
