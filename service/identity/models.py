"""Identity tables. Secrets that authenticate a bearer (tokens, codes, session cookies) are stored hashed."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, Text
from sqlmodel import Field, SQLModel

from service.db.columns import utc_column as _utc_column
from service.db.metadata import utcnow


class User(SQLModel, table=True):
    __tablename__ = "user_account"

    id: str = Field(primary_key=True, max_length=40)
    username: str = Field(max_length=150, unique=True)
    password_hash: str = Field(sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow, sa_column=_utc_column())


class OAuthClient(SQLModel, table=True):
    """A dynamically registered OAuth client.

    `info_json` holds the registration as the SDK gave it, less the client secret, whose digest
    alone is kept in `client_secret_hash` (None for public clients).
    """

    __tablename__ = "oauth_client"

    client_id: str = Field(primary_key=True, max_length=64)
    info_json: str = Field(sa_type=Text)
    client_secret_hash: str | None = Field(default=None, max_length=64)
    # Indexed: /register counts the last hour's registrations, retention finds old unused clients.
    created_at: datetime = Field(default_factory=utcnow, sa_column=_utc_column(index=True))


class OAuthConsent(SQLModel, table=True):
    """A user's standing approval of one client sending codes to one redirect URI.

    Keyed by the redirect URI's digest so the key stays short whatever the URI's length.
    """

    __tablename__ = "oauth_consent"

    user_id: str = Field(foreign_key="user_account.id", ondelete="CASCADE", primary_key=True, max_length=40)
    # Indexed, as are the codes' and tokens' client ids: retention looks up a client's use by them,
    # and deleting a client cascades to its consents and codes.
    client_id: str = Field(
        foreign_key="oauth_client.client_id", ondelete="CASCADE", primary_key=True, max_length=64, index=True
    )
    redirect_uri_hash: str = Field(primary_key=True, max_length=64)
    redirect_uri: str = Field(sa_type=Text)
    scopes: str = Field(default="", sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow, sa_column=_utc_column())


class AuthorizationCode(SQLModel, table=True):
    """A code minted on consent. Redeeming it leaves the row as a tombstone (`redeemed_at` and the
    `grant_id` it started) until retention prunes it, so a replay can revoke that grant."""

    __tablename__ = "oauth_authorization_code"

    code_hash: str = Field(primary_key=True, max_length=64)
    client_id: str = Field(
        foreign_key="oauth_client.client_id", ondelete="CASCADE", max_length=64, index=True
    )
    user_id: str = Field(foreign_key="user_account.id", ondelete="CASCADE", max_length=40)
    scopes: str = Field(default="", sa_type=Text)
    code_challenge: str = Field(max_length=128)
    redirect_uri: str = Field(sa_type=Text)
    redirect_uri_provided_explicitly: bool
    resource: str | None = Field(default=None, sa_type=Text)
    expires_at: datetime = Field(sa_column=_utc_column())
    created_at: datetime = Field(default_factory=utcnow, sa_column=_utc_column())
    redeemed_at: datetime | None = Field(default=None, sa_column=_utc_column(nullable=True))
    grant_id: str | None = Field(default=None, max_length=40)


MAX_TOKEN_LABEL_LENGTH = 200


class Token(SQLModel, table=True):
    """Access, refresh and personal access tokens.

    `grant_id` ties together every token minted from one authorization, so revoking one of
    them (or reusing a rotated refresh token) revokes the whole grant.
    """

    __tablename__ = "token"
    __table_args__ = (Index("ix_token_grant_id", "grant_id"),)

    id: str = Field(primary_key=True, max_length=40)
    token_hash: str = Field(max_length=64, unique=True)
    kind: str = Field(max_length=16)  # access | refresh | personal
    grant_id: str = Field(max_length=40)
    client_id: str = Field(max_length=64, index=True)
    user_id: str = Field(foreign_key="user_account.id", ondelete="CASCADE", max_length=40, index=True)
    scopes: str = Field(default="", sa_type=Text)
    resource: str | None = Field(default=None, sa_type=Text)
    label: str | None = Field(default=None, max_length=MAX_TOKEN_LABEL_LENGTH)
    expires_at: datetime | None = Field(default=None, sa_column=_utc_column(nullable=True))
    revoked_at: datetime | None = Field(default=None, sa_column=_utc_column(nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=_utc_column())


class BrowserSession(SQLModel, table=True):
    """A logged-in browser; the cookie holds the secret, the row its hash."""

    __tablename__ = "browser_session"

    id_hash: str = Field(primary_key=True, max_length=64)
    user_id: str = Field(foreign_key="user_account.id", ondelete="CASCADE", max_length=40, index=True)
    expires_at: datetime = Field(sa_column=_utc_column())
    created_at: datetime = Field(default_factory=utcnow, sa_column=_utc_column())
