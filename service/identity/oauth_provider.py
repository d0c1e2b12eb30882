"""The built-in OAuth 2.1 authorization server, as the SDK's provider protocol wants it.

The SDK's handlers do the HTTP side (registration, /authorize, /token, PKCE checks), some of them
behind our own routes (oauth_routes.py); this class owns storage. `/authorize` hands the browser
to our login page with the request sealed in the URL, so nothing is stored until a user has
logged in and approved the client on the consent page.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol
from urllib.parse import urlsplit

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
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl
from sqlalchemy import update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from service.db.engine import SessionFactory
from service.db.metadata import utcnow
from service.db.upsert import upsert_into
from service.identity import service as identity
from service.identity.client_registration import MAX_CLIENT_NAME_LENGTH, check_registration
from service.identity.models import AuthorizationCode, OAuthClient, OAuthConsent, Token, User
from service.identity.secrets import digest, new_id, new_secret
from service.identity.token_cache import TokenCache

AUTHORIZE_REQUEST_MAX_AGE_SECONDS = 900
MAX_CLIENT_ID_LENGTH = 64  # the column's length; the SDK issues 36-character UUIDs
# Bounds on what an /authorize request carries, far above what clients send (a state is a random
# value of some 20-60 characters; an S256 code challenge is 43), and small enough that the sealed
# request always fits MAX_AUTHZ_LENGTH, the most the login and consent pages accept.
MAX_STATE_LENGTH = 1024
MAX_SCOPE_LENGTH = 1024  # the requested scopes, space-separated
MAX_CODE_CHALLENGE_LENGTH = 128  # the column's length, and RFC 7636's longest code verifier
MAX_AUTHZ_LENGTH = 8192
# Dynamic registration as /register serves it, and the client auth methods /token and /revoke accept.
REGISTRATION_OPTIONS = ClientRegistrationOptions(enabled=True)
TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_post", "client_secret_basic", "none"]

# The window the deployment-wide registration cap counts in.
REGISTRATION_WINDOW = timedelta(hours=1)

RevocationListener = Callable[[str], Awaitable[None]]


class RevocationChannel(Protocol):
    """Carries revoked grant ids to every replica, so each drops them from its token cache."""

    def subscribe_revocations(self, listener: RevocationListener) -> None: ...

    async def publish_revocation(self, grant_id: str) -> None: ...


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

    @property
    def redirect_uri(self) -> str:
        return str(self.params.redirect_uri)

    @property
    def redirect_host(self) -> str:
        """Where the code goes, as the consent page names it (host, and port when one is given)."""
        return urlsplit(self.redirect_uri).netloc or self.redirect_uri


def authorization_params_too_long(params: AuthorizationParams) -> str | None:
    """What part of an authorization request is over its bound, said for the client; None if none."""
    if params.state is not None and len(params.state) > MAX_STATE_LENGTH:
        return f"state is at most {MAX_STATE_LENGTH} characters"
    if len(" ".join(params.scopes or [])) > MAX_SCOPE_LENGTH:
        return f"scope is at most {MAX_SCOPE_LENGTH} characters"
    if len(params.code_challenge) > MAX_CODE_CHALLENGE_LENGTH:
        return f"code_challenge is at most {MAX_CODE_CHALLENGE_LENGTH} characters"
    return None


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
        verified: TokenCache[StoredAccessToken] | None = None,
        revocations: RevocationChannel | None = None,
    ) -> None:
        self._sessions = sessions
        self._public_base_url = public_base_url
        self._resource_url = resource_url.rstrip("/")
        self._serializer = URLSafeTimedSerializer(secret_key, salt="oauth-authorize-request")
        self._access_ttl = access_token_ttl
        self._refresh_ttl = refresh_token_ttl
        self._code_ttl = code_ttl
        self._verified: TokenCache[StoredAccessToken] = verified or TokenCache(ttl=0.0)
        self._revocations = revocations
        if revocations is not None:
            revocations.subscribe_revocations(self._forget_grant)

    # -- clients ---------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        """The registration without its secret, which only `client_secret_matches` can check."""
        if not identity.could_be_stored(client_id, MAX_CLIENT_ID_LENGTH):
            return None  # unknown, as any id never registered
        async with self._sessions() as session:
            row = await session.get(OAuthClient, client_id)
        return OAuthClientInformationFull.model_validate_json(row.info_json) if row else None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        check_registration(client_info)
        secret = client_info.client_secret
        stored = client_info.model_copy(update={"client_secret": None})
        async with self._sessions() as session, session.begin():
            session.add(
                OAuthClient(
                    client_id=client_info.client_id,
                    info_json=stored.model_dump_json(exclude_none=True),
                    client_secret_hash=digest(secret) if secret else None,
                )
            )

    async def registration_wait(self, per_window: int) -> int | None:
        """Seconds until a client may register again when `per_window` registered in the last
        `REGISTRATION_WINDOW` across every replica, or None if one may now.

        The `per_window`-th newest registration of the window ages out of it first; reading it alone
        (through the index on `created_at`) answers both questions without counting every row.
        Concurrent registrations may each see room, so the cap can be passed by as many as arrive
        at once.
        """
        now = utcnow()
        async with self._sessions() as session:
            result = await session.exec(
                select(OAuthClient.created_at)
                .where(col(OAuthClient.created_at) > now - REGISTRATION_WINDOW)
                .order_by(col(OAuthClient.created_at).desc())
                .offset(per_window - 1)
                .limit(1)
            )
            last_counted = result.first()
        if last_counted is None:
            return None
        return max(1, math.ceil((last_counted + REGISTRATION_WINDOW - now).total_seconds()))

    async def client_secret_matches(self, client_id: str, secret: str) -> bool:
        if not identity.could_be_stored(client_id, MAX_CLIENT_ID_LENGTH):
            return False
        async with self._sessions() as session:
            row = await session.get(OAuthClient, client_id)
        if row is None or row.client_secret_hash is None:
            return False
        return hmac.compare_digest(digest(secret), row.client_secret_hash)

    # -- authorization ---------------------------------------------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        too_long = authorization_params_too_long(params)
        if too_long is not None:
            raise AuthorizeError("invalid_request", too_long)
        if params.resource is not None and params.resource.rstrip("/") != self._resource_url:
            raise AuthorizeError("invalid_target", "this server only issues tokens for its own MCP endpoint")
        params = params.model_copy(update={"resource": self._resource_url})
        sealed = self._serializer.dumps(
            {
                "client_id": client.client_id,
                "client_name": (client.client_name or "")[:MAX_CLIENT_NAME_LENGTH] or None,
                "params": params.model_dump(mode="json"),
            }
        )
        if len(sealed) > MAX_AUTHZ_LENGTH:  # escaped non-ASCII text grows; the pages could not take it
            raise AuthorizeError("invalid_request", "the authorization request is too long")
        return f"{self._public_base_url}/login?authz={sealed}"

    def sends_to_sign_in(self, location: str | None) -> bool:
        """Whether `location` is where `authorize` sends a valid request: our sign-in page."""
        return location is not None and location.startswith(f"{self._public_base_url}/login?authz=")

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

    # -- consent ---------------------------------------------------------------------------

    async def consent_remembered(
        self, session: AsyncSession, pending: PendingAuthorization, user: User
    ) -> bool:
        """Whether `user` already approved this client sending codes to this redirect URI."""
        row = await session.get(OAuthConsent, (user.id, pending.client_id, digest(pending.redirect_uri)))
        if row is None:
            return False
        return set(pending.params.scopes or []) <= set(row.scopes.split())

    async def remember_consent(
        self, session: AsyncSession, pending: PendingAuthorization, user: User
    ) -> None:
        values = {
            "user_id": user.id,
            "client_id": pending.client_id,
            "redirect_uri_hash": digest(pending.redirect_uri),
            "redirect_uri": pending.redirect_uri,
            "scopes": " ".join(pending.params.scopes or []),
            "created_at": utcnow(),
        }
        statement = upsert_into(session, OAuthConsent).values(**values)
        # Two approvals at once (a double click) both succeed; the later one's scopes stand.
        await session.exec(
            statement.on_conflict_do_update(
                index_elements=["user_id", "client_id", "redirect_uri_hash"],
                set_={"scopes": statement.excluded.scopes, "created_at": statement.excluded.created_at},
            )
        )

    async def complete_authorization(
        self, session: AsyncSession, pending: PendingAuthorization, user: User
    ) -> str:
        """Mint a code for the consenting user in the caller's transaction; returns the redirect URL."""
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
        if row is None:
            return None
        if row.grant_id is not None:
            # A redeemed code presented again means it leaked: end the grant its redemption started.
            await self._revoke_grant(row.grant_id)
            return None
        if row.client_id != client.client_id:
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
        code_hash = digest(authorization_code.code)
        grant_id = new_id("grt")
        async with self._sessions() as session, session.begin():
            # One conditional UPDATE decides which of several concurrent exchanges of a code wins;
            # the row stays as a tombstone naming the grant, so a later replay can revoke it.
            redeemed = await session.exec(
                update(AuthorizationCode)
                .where(
                    col(AuthorizationCode.code_hash) == code_hash,
                    col(AuthorizationCode.client_id) == client.client_id,
                    col(AuthorizationCode.grant_id).is_(None),
                )
                .values(redeemed_at=utcnow(), grant_id=grant_id)
            )
            if redeemed.rowcount == 1:
                return await self._issue_pair(
                    session,
                    client_id=client.client_id,
                    user_id=authorization_code.user_id,
                    grant_id=grant_id,
                    scopes=authorization_code.scopes,
                    resource=authorization_code.resource,
                )
            # The UPDATE waited for the winner's commit (a row lock, or SQLite's write lock), so
            # its grant is visible here.
            winner = await session.exec(
                select(AuthorizationCode.grant_id).where(col(AuthorizationCode.code_hash) == code_hash)
            )
            replayed_grant = winner.first()
        # Another request redeemed it first: the same code used twice, so treat it as leaked.
        if replayed_grant is not None:
            await self._revoke_grant(replayed_grant)
        raise TokenError("invalid_grant", "authorization code was already used; the grant is revoked")

    # -- refresh ---------------------------------------------------------------------------

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> StoredRefreshToken | None:
        async with self._sessions() as session:
            result = await session.exec(select(Token).where(Token.token_hash == digest(refresh_token)))
            token = result.first()
        if token is None or token.kind != "refresh":
            return None
        if token.revoked_at is not None:
            # A rotated-away refresh token presented again means it leaked: end the whole grant.
            await self._revoke_grant(token.grant_id)
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

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: StoredRefreshToken, scopes: list[str]
    ) -> OAuthToken:
        assert client.client_id is not None
        async with self._sessions() as session, session.begin():
            # One conditional UPDATE decides which of several concurrent refreshes rotates the token.
            rotated = await session.exec(
                update(Token)
                .where(
                    col(Token.token_hash) == digest(refresh_token.token),
                    col(Token.kind) == "refresh",
                    col(Token.revoked_at).is_(None),
                )
                .values(revoked_at=utcnow())
            )
            if rotated.rowcount == 1:
                return await self._issue_pair(
                    session,
                    client_id=client.client_id,
                    user_id=refresh_token.user_id,
                    grant_id=refresh_token.grant_id,
                    scopes=scopes or refresh_token.scopes,
                    resource=refresh_token.resource,
                )
        # Another request rotated it first: the same token used twice, so treat it as leaked.
        await self._revoke_grant(refresh_token.grant_id)
        raise TokenError("invalid_grant", "refresh token was already used; the grant is revoked")

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
        await self._revoke_grant(token.grant_id)

    async def _revoke_grant(self, grant_id: str) -> None:
        """Revokes every token of the grant, then tells every replica to stop trusting them."""
        async with self._sessions() as session, session.begin():
            await identity.revoke_grant(session, grant_id)
        self._verified.forget_grant(grant_id)
        if self._revocations is not None:
            await self._revocations.publish_revocation(grant_id)

    async def _forget_grant(self, grant_id: str) -> None:
        self._verified.forget_grant(grant_id)

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: Any
    ) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "identity assertions are not enabled")
