"""External identities (issuer, subject) mapped to our own user accounts, created on first sight.

Every other table keys users by `user_account.id`, so a verified external token is turned into
our user id here and nothing downstream knows an external provider exists. The mapping never
changes once made, so it is remembered in process: a warm tool call does no database work for it.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from sqlalchemy.exc import IntegrityError

from service.db.engine import SessionFactory
from service.identity import service as identity
from service.identity.models import User
from service.identity.oidc.models import ExternalIdentity
from service.identity.secrets import new_id

logger = logging.getLogger(__name__)

UNUSABLE_PASSWORD_HASH = "!external-identity"  # noqa: S105 - not an argon2 hash: no password matches
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_.@-]+")


def username_candidates(issuer: str, subject: str, claims: Mapping[str, Any]) -> list[str]:
    """Readable names first (preferred_username, email, sub), then the same made unique per identity."""
    suffix = hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()[:8]
    bases: list[str] = []
    for claim in ("preferred_username", "email"):
        value = claims.get(claim)
        if isinstance(value, str):
            bases.append(value)
    bases.append(subject)
    names: list[str] = []
    for base in bases:
        cleaned = _NOT_ALLOWED.sub("-", base).strip("-._@")[:120]
        if cleaned and identity.USERNAME_PATTERN.match(cleaned):
            names.append(cleaned)
    names = list(dict.fromkeys(names)) or ["user"]
    return [*names, f"{names[0]}-{suffix}", f"{names[0]}-{suffix}-{new_id('x')[2:10]}"]


class ExternalIdentities:
    """(issuer, subject) -> our user id, creating the account the first time an identity appears."""

    def __init__(self, sessions: SessionFactory, *, max_entries: int = 100_000) -> None:
        self._sessions = sessions
        self._max_entries = max_entries
        self._known: OrderedDict[tuple[str, str], str] = OrderedDict()

    async def user_id(self, issuer: str, subject: str, claims: Mapping[str, Any]) -> str:
        key = (issuer, subject)
        known = self._known.get(key)
        if known is not None:
            return known
        user_id = await self._find_or_create(issuer, subject, claims)
        self._known[key] = user_id
        while len(self._known) > self._max_entries:
            self._known.popitem(last=False)
        return user_id

    async def user(self, issuer: str, subject: str, claims: Mapping[str, Any]) -> User:
        user_id = await self.user_id(issuer, subject, claims)
        async with self._sessions() as session:
            user = await session.get(User, user_id)
        assert user is not None, "an external identity points at a missing user"
        return user

    async def _find_or_create(self, issuer: str, subject: str, claims: Mapping[str, Any]) -> str:
        if len(issuer) > 255 or len(subject) > 255:
            raise ValueError("issuer or subject longer than 255 characters")
        # Two first requests of one identity may race: the loser's insert fails and it reads the winner's.
        for username in username_candidates(issuer, subject, claims):
            try:
                async with self._sessions() as session, session.begin():
                    existing = await session.get(ExternalIdentity, (issuer, subject))
                    if existing is not None:
                        return existing.user_id
                    if await identity.get_user_by_username(session, username) is not None:
                        continue
                    user = User(id=new_id("usr"), username=username, password_hash=UNUSABLE_PASSWORD_HASH)
                    session.add(user)
                    await session.flush()
                    session.add(ExternalIdentity(issuer=issuer, subject=subject, user_id=user.id))
                    await session.flush()
            except IntegrityError:
                continue  # the name, or the identity itself, was taken meanwhile: look again
            logger.info("created user %s for a new external identity", user.id)
            return user.id
        async with self._sessions() as session:
            existing = await session.get(ExternalIdentity, (issuer, subject))
        if existing is None:
            raise RuntimeError("could not create an account for an external identity")
        return existing.user_id
