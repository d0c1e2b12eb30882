"""A replayed authorization code ends the grant its first redemption started (RFC 6749 §4.1.2,
RFC 9700 §4.2.4), and the redeemed code's tombstone lives only until retention prunes it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import update
from sqlmodel import col

from service.db.metadata import utcnow
from service.identity.models import AuthorizationCode, Token
from service.retention import RetentionJob, RetentionPolicy
from tests.support.oauth import exchange_code, refresh_with, signed_in_code, whoami_status
from tests.support.service import RunningService


async def test_replaying_a_redeemed_code_revokes_the_tokens_it_issued(service: RunningService) -> None:
    await service.add_user("victim")
    async with service.http() as http:
        client_id, code, verifier = await signed_in_code(service, http, "victim")
        first = await exchange_code(http, client_id, code, verifier)
        assert first.status_code == 200, first.text
        tokens = first.json()
        assert await whoami_status(service, tokens["access_token"]) == 200  # now in the token cache

        replayed = await exchange_code(http, client_id, code, verifier)
        assert replayed.status_code == 400
        assert replayed.json()["error"] == "invalid_grant"

        assert await whoami_status(service, tokens["access_token"]) == 401
        refreshed = await refresh_with(http, client_id, tokens["refresh_token"])
        assert refreshed.status_code == 400
        assert refreshed.json()["error"] == "invalid_grant"


async def test_concurrent_redemptions_of_one_code_issue_once_and_end_revoked(
    service: RunningService,
) -> None:
    await service.add_user("racer")
    async with service.http() as http:
        client_id, code, verifier = await signed_in_code(service, http, "racer")
        exchanges = await asyncio.gather(*(exchange_code(http, client_id, code, verifier) for _ in range(4)))
        assert sorted(response.status_code for response in exchanges) == [200, 400, 400, 400]
        assert all(r.json()["error"] == "invalid_grant" for r in exchanges if r.status_code == 400)
        (tokens,) = (response.json() for response in exchanges if response.status_code == 200)

        issued = await service.rows(Token, client_id=client_id)
        assert len(issued) == 2  # one access and one refresh token
        assert all(token.revoked_at is not None for token in issued)
        assert await whoami_status(service, tokens["access_token"]) == 401
        assert (await refresh_with(http, client_id, tokens["refresh_token"])).status_code == 400


async def test_a_redeemed_code_is_kept_until_retention_prunes_it(service: RunningService) -> None:
    await service.add_user("keeper")
    async with service.http() as http:
        client_id, code, verifier = await signed_in_code(service, http, "keeper")
        assert (await exchange_code(http, client_id, code, verifier)).status_code == 200
    (tombstone,) = await service.rows(AuthorizationCode, client_id=client_id)
    assert tombstone.redeemed_at is not None
    (grant_id,) = {token.grant_id for token in await service.rows(Token, client_id=client_id)}
    assert tombstone.grant_id == grant_id

    policy = RetentionPolicy()
    job = RetentionJob(service.runtime.sessions, policy)
    assert (await job.run()).ran
    assert len(await service.rows(AuthorizationCode, client_id=client_id)) == 1  # not expired yet

    # As if the code had expired longer ago than retention keeps expired rows.
    async with service.runtime.sessions() as session, session.begin():
        await session.exec(
            update(AuthorizationCode)
            .where(col(AuthorizationCode.client_id) == client_id)
            .values(expires_at=utcnow() - policy.after_expiry - timedelta(minutes=1))
        )
    report = await job.run()
    assert report.ran
    assert report.deleted["oauth_authorization_code"] == 1
    assert await service.rows(AuthorizationCode, client_id=client_id) == []
