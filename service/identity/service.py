"""Account, token and browser-session operations. Callers own the transaction, except `authenticate`'s."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from service.db.engine import SessionFactory
from service.db.metadata import utcnow
from service.identity.models import BrowserSession, Token, User
from service.identity.passwords import HashingBusy, PasswordHashing
from service.identity.secrets import digest, new_id, new_secret

PERSONAL_TOKEN_CLIENT_ID = "personal-access-token"  # noqa: S105 - a client id
MAX_USERNAME_LENGTH = 150  # the column's length, and USERNAME_PATTERN's
USERNAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,149}$")
MAX_PASSWORD_LENGTH = 1024  # what the login form accepts
# Not an argon2 hash, so no password ever matches it (the check fails as an invalid hash).
DISABLED_PASSWORD_HASH = "!disabled"  # noqa: S105 - a marker, not a secret


class IdentityError(Exception):
    """A user-facing refusal: the message is safe to show."""


@dataclass(frozen=True)
class IssuedToken:
    token: Token
    secret: str


def check_password_rules(password: str) -> None:
    if len(password) < 8:
        raise IdentityError("passwords need at least 8 characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise IdentityError(f"passwords have at most {MAX_PASSWORD_LENGTH} characters")


async def create_user(
    session: AsyncSession, username: str, password: str, passwords: PasswordHashing
) -> User:
    if not USERNAME_PATTERN.match(username):
        raise IdentityError("usernames are 1-150 letters, digits or . _ @ -, starting with a letter or digit")
    check_password_rules(password)
    if await get_user_by_username(session, username) is not None:
        raise IdentityError(f"user {username!r} already exists")
    user = User(id=new_id("usr"), username=username, password_hash=await passwords.hash(password))
    session.add(user)
    await session.flush()
    return user


def could_be_stored(key: str, max_length: int) -> bool:
    """Whether `key` could be a stored name or id: no NUL (PostgreSQL refuses one in text, so the
    lookup itself would fail) and no longer than its column."""
    return len(key) <= max_length and "\x00" not in key


async def get_user_by_username(session: AsyncSession, username: str) -> User | None:
    if not could_be_stored(username, MAX_USERNAME_LENGTH):
        return None
    result = await session.exec(select(User).where(User.username == username))
    return result.first()


async def authenticate(
    sessions: SessionFactory, username: str, password: str, passwords: PasswordHashing
) -> User | None:
    """The user if the password is theirs. The hash is checked with no connection or transaction
    held: a sign-in waits for a hashing slot for as long as the queue is long, and the pool's
    connections (SQLite's one) must serve everything else meanwhile. The user is read only once
    the check has its slot, so a flood costs the database no more reads than hashing can keep up
    with. Raises `HashingBusy`."""
    user: User | None = None

    async def stored_hash() -> str | None:
        nonlocal user
        async with sessions() as session:
            user = await get_user_by_username(session, username)
        return user.password_hash if user else None

    if not await passwords.verify_stored(stored_hash, password) or user is None:
        return None
    if passwords.needs_rehash(user.password_hash):
        try:
            new_hash = await passwords.hash(password)
        except HashingBusy:
            return user  # the rehash waits for a quieter sign-in
        async with sessions() as session, session.begin():
            await session.exec(update(User).where(col(User.id) == user.id).values(password_hash=new_hash))
        user.password_hash = new_hash
    return user


def password_is_disabled(password_hash: str) -> bool:
    return password_hash == DISABLED_PASSWORD_HASH


async def set_password(
    session: AsyncSession, username: str, password: str, passwords: PasswordHashing
) -> User:
    user = await get_user_by_username(session, username)
    if user is None:
        raise IdentityError(f"no user named {username!r}")
    check_password_rules(password)
    user.password_hash = await passwords.hash(password)
    session.add(user)
    return user


async def disable_user(session: AsyncSession, username: str) -> User:
    """No more sign-ins, and every token and browser session of the user ends."""
    user = await get_user_by_username(session, username)
    if user is None:
        raise IdentityError(f"no user named {username!r}")
    user.password_hash = DISABLED_PASSWORD_HASH
    session.add(user)
    await session.exec(
        update(Token)
        .where(col(Token.user_id) == user.id, col(Token.revoked_at).is_(None))
        .values(revoked_at=utcnow())
    )
    await session.exec(delete(BrowserSession).where(col(BrowserSession.user_id) == user.id))
    return user


async def list_users(session: AsyncSession) -> list[User]:
    result = await session.exec(select(User).order_by(col(User.username)))
    return list(result.all())


async def issue_token(
    session: AsyncSession,
    *,
    kind: str,
    user_id: str,
    client_id: str,
    grant_id: str,
    scopes: list[str],
    resource: str | None,
    ttl: timedelta | None,
    label: str | None = None,
) -> IssuedToken:
    prefix = {"access": "mcp_at", "refresh": "mcp_rt", "personal": "mcp_pat"}[kind]
    secret = new_secret(prefix)
    token = Token(
        id=new_id("tok"),
        token_hash=digest(secret),
        kind=kind,
        grant_id=grant_id,
        client_id=client_id,
        user_id=user_id,
        scopes=" ".join(scopes),
        resource=resource,
        label=label,
        expires_at=utcnow() + ttl if ttl else None,
    )
    session.add(token)
    await session.flush()
    return IssuedToken(token=token, secret=secret)


async def create_personal_token(
    session: AsyncSession, username: str, *, resource: str, label: str | None, ttl: timedelta | None
) -> IssuedToken:
    user = await get_user_by_username(session, username)
    if user is None:
        raise IdentityError(f"no user named {username!r}")
    return await issue_token(
        session,
        kind="personal",
        user_id=user.id,
        client_id=PERSONAL_TOKEN_CLIENT_ID,
        grant_id=new_id("grt"),
        scopes=[],
        resource=resource,
        ttl=ttl,
        label=label,
    )


async def find_live_token(session: AsyncSession, secret: str, kinds: tuple[str, ...]) -> Token | None:
    """The unrevoked, unexpired token with this secret, if it is one of `kinds`."""
    result = await session.exec(select(Token).where(Token.token_hash == digest(secret)))
    token = result.first()
    if token is None or token.kind not in kinds or token.revoked_at is not None:
        return None
    if token.expires_at is not None and token.expires_at <= utcnow():
        return None
    return token


async def revoke_grant(session: AsyncSession, grant_id: str) -> int:
    statement = (
        update(Token)
        .where(col(Token.grant_id) == grant_id, col(Token.revoked_at).is_(None))
        .values(revoked_at=utcnow())
    )
    result = await session.exec(statement)
    return int(result.rowcount)


async def revoke_token_by_id(session: AsyncSession, token_id: str) -> bool:
    token = await session.get(Token, token_id)
    if token is None:
        return False
    return await revoke_grant(session, token.grant_id) > 0 or token.revoked_at is not None


async def list_tokens(session: AsyncSession, username: str) -> list[Token]:
    user = await get_user_by_username(session, username)
    if user is None:
        raise IdentityError(f"no user named {username!r}")
    result = await session.exec(select(Token).where(Token.user_id == user.id).order_by(col(Token.created_at)))
    return list(result.all())


async def start_browser_session(
    session: AsyncSession, user: User, ttl: timedelta, *, replaces: str | None, max_live: int
) -> str:
    """A new browser session's secret. The one the browser's cookie held (`replaces`) ends, and so
    do the user's oldest live sessions past `max_live`, so sign-ins cannot pile up rows. The new
    session is never among those ended, even when another replica's clock runs ahead of ours."""
    await end_browser_session(session, replaces)
    now = utcnow()
    secret = new_secret("bs")
    new_hash = digest(secret)
    session.add(BrowserSession(id_hash=new_hash, user_id=user.id, expires_at=now + ttl))
    await session.flush()
    beyond = (
        select(BrowserSession.id_hash)
        .where(
            col(BrowserSession.user_id) == user.id,
            col(BrowserSession.expires_at) > now,
            col(BrowserSession.id_hash) != new_hash,
        )
        .order_by(col(BrowserSession.created_at).desc(), col(BrowserSession.id_hash).desc())
        .offset(max(max_live - 1, 0))
    )
    stale = list((await session.exec(beyond)).all())
    if stale:
        await session.exec(delete(BrowserSession).where(col(BrowserSession.id_hash).in_(stale)))
    return secret


async def browser_session_user(session: AsyncSession, secret: str | None) -> User | None:
    if not secret:
        return None
    row = await session.get(BrowserSession, digest(secret))
    if row is None or row.expires_at <= utcnow():
        return None
    return await session.get(User, row.user_id)


async def end_browser_session(session: AsyncSession, secret: str | None) -> None:
    if secret:
        row = await session.get(BrowserSession, digest(secret))
        if row is not None:
            await session.delete(row)


def expires_in_seconds(expires_at: datetime | None) -> int | None:
    if expires_at is None:
        return None
    return max(0, int((expires_at - utcnow()).total_seconds()))
