"""A password hashed with older argon2 parameters is rehashed with the configured ones at sign-in."""

from __future__ import annotations

from service.db.engine import create_engine, create_session_factory
from service.identity import service as identity
from service.identity.models import User
from service.identity.passwords import PasswordHashing
from tests.support.service import DEFAULT_PASSWORD, cheap_password_hashing


async def test_signing_in_rehashes_with_the_configured_parameters(database_url: str) -> None:
    engine = create_engine(database_url)
    sessions = create_session_factory(engine)
    stronger = PasswordHashing(time_cost=2, memory_kib=256, parallelism=1, concurrency=1)
    try:
        async with sessions() as session, session.begin():
            user = await identity.create_user(session, "rehashed", DEFAULT_PASSWORD, cheap_password_hashing())
            old_hash = user.password_hash

        assert await identity.authenticate(sessions, "rehashed", "wrong password", stronger) is None
        async with sessions() as session:
            unchanged = await session.get(User, user.id)
            assert unchanged is not None and unchanged.password_hash == old_hash

        assert await identity.authenticate(sessions, "rehashed", DEFAULT_PASSWORD, stronger) is not None
        async with sessions() as session:
            rehashed = await session.get(User, user.id)
            assert rehashed is not None
            assert "m=256,t=2,p=1" in rehashed.password_hash
            assert not stronger.needs_rehash(rehashed.password_hash)

        signed_in = await identity.authenticate(sessions, "rehashed", DEFAULT_PASSWORD, stronger)
        assert signed_in is not None and signed_in.id == user.id
    finally:
        await engine.dispose()
