"""The retention job deletes what is past its period, in batches, and keeps everything else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlmodel import select

from service.audit.models import AuditEvent
from service.billing.leases import try_acquire
from service.billing.models import StripeEvent
from service.db.engine import SessionFactory, create_engine, create_session_factory
from service.db.metadata import utcnow
from service.identity import service as identity
from service.identity.models import AuthorizationCode, BrowserSession, OAuthClient, OAuthConsent, Token
from service.identity.oidc.models import ConsumedLoginState
from service.paywall.models import Elicitation, ElicitationDelivery
from service.retention import LEASE_NAME, RetentionJob, RetentionPolicy
from tests.support.service import cheap_password_hashing

DAY = timedelta(days=1)


def token(
    token_id: str,
    user_id: str,
    kind: str = "personal",
    *,
    expires_at: datetime | None = None,
    revoked_at: datetime | None = None,
) -> Token:
    return Token(
        id=token_id,
        token_hash=f"hash-{token_id}",
        kind=kind,
        grant_id=f"grant-{token_id}",
        client_id="personal",
        user_id=user_id,
        expires_at=expires_at,
        revoked_at=revoked_at,
    )


def elicitation(elicitation_id: str, user_id: str, expires_in: timedelta) -> Elicitation:
    return Elicitation(
        id=elicitation_id,
        user_id=user_id,
        plan_id="pro",
        tool_name="ascii_chart",
        protocol_era="2025-11-25",
        status="expired" if expires_in < timedelta(0) else "open",
        expires_at=utcnow() + expires_in,
    )


@pytest.fixture
async def sessions(database_url: str) -> AsyncIterator[SessionFactory]:
    """The database alone: a running service would add rows of its own (its sandbox's webhooks)."""
    engine = create_engine(database_url)
    yield create_session_factory(engine)
    await engine.dispose()


async def rows(sessions: SessionFactory, model: Any) -> list[Any]:
    async with sessions() as session:
        return list((await session.exec(select(model))).all())


async def seed(sessions: SessionFactory) -> None:
    async with sessions() as session, session.begin():
        user = await identity.create_user(session, "retained", "a long password", cheap_password_hashing())
    now = utcnow()
    seeded: list[object] = [OAuthClient(client_id="client-1", info_json="{}")]
    seeded += [
        AuditEvent(kind="webhook_accepted", at=now - 91 * DAY, detail=f'{{"n": {n}}}') for n in range(5)
    ]
    seeded += [AuditEvent(kind="webhook_accepted", at=now - 89 * DAY, detail='{"keep": true}')]
    seeded += [
        StripeEvent(
            id="evt_old", type="invoice.paid", created=1, outcome="applied", received_at=now - 31 * DAY
        ),
        StripeEvent(
            id="evt_recent", type="invoice.paid", created=1, outcome="applied", received_at=now - 29 * DAY
        ),
        BrowserSession(id_hash="session-old", user_id=user.id, expires_at=now - 8 * DAY),
        BrowserSession(id_hash="session-recent", user_id=user.id, expires_at=now - 6 * DAY),
        BrowserSession(id_hash="session-live", user_id=user.id, expires_at=now + DAY),
        token("tok_expired_old", user.id, kind="access", expires_at=now - 8 * DAY),
        token("tok_expired_recent", user.id, kind="refresh", expires_at=now - 6 * DAY),
        token("tok_revoked_old", user.id, revoked_at=now - 8 * DAY),
        token("tok_revoked_recent", user.id, revoked_at=now - 6 * DAY),
        token("tok_forever", user.id),
        elicitation("el_old", user.id, -8 * DAY),
        elicitation("el_recent", user.id, -6 * DAY),
        elicitation("el_open", user.id, DAY),
        # Consumed sign-in states go an hour after their login cookie expired, not days after.
        ConsumedLoginState(state_hash="state-old", expires_at=now - timedelta(minutes=61)),
        ConsumedLoginState(state_hash="state-recent", expires_at=now - timedelta(minutes=59)),
        ConsumedLoginState(state_hash="state-live", expires_at=now + timedelta(minutes=5)),
    ]
    async with sessions() as session, session.begin():
        session.add_all(seeded)
        await session.flush()
        session.add_all(
            [
                AuthorizationCode(
                    code_hash=f"code-{name}",
                    client_id="client-1",
                    user_id=user.id,
                    code_challenge="x",
                    redirect_uri="http://127.0.0.1/cb",
                    redirect_uri_provided_explicitly=True,
                    expires_at=now - age,
                )
                for name, age in (("old", 8 * DAY), ("recent", 6 * DAY))
            ]
            + [
                ElicitationDelivery(elicitation_id=name, mcp_session_id="s1")
                for name in ("el_old", "el_recent")
            ]
        )


async def test_retention_deletes_old_rows_and_keeps_recent_ones(sessions: SessionFactory) -> None:
    await seed(sessions)
    job = RetentionJob(sessions, RetentionPolicy(batch_rows=2))

    report = await job.run()

    assert report.ran
    assert report.deleted == {
        "audit_event": 5,
        "stripe_event": 1,
        "browser_session": 1,
        "oauth_authorization_code": 1,
        "token": 2,
        "elicitation": 1,
        "oidc_consumed_state": 1,
        "oauth_client": 0,
    }
    assert [row.detail for row in await rows(sessions, AuditEvent)] == ['{"keep": true}']
    assert [row.id for row in await rows(sessions, StripeEvent)] == ["evt_recent"]
    assert {row.id_hash for row in await rows(sessions, BrowserSession)} == {"session-recent", "session-live"}
    assert [row.code_hash for row in await rows(sessions, AuthorizationCode)] == ["code-recent"]
    assert {row.id for row in await rows(sessions, Token)} == {
        "tok_expired_recent",
        "tok_revoked_recent",
        "tok_forever",
    }
    assert {row.id for row in await rows(sessions, Elicitation)} == {"el_recent", "el_open"}
    assert [row.elicitation_id for row in await rows(sessions, ElicitationDelivery)] == ["el_recent"]
    assert {row.state_hash for row in await rows(sessions, ConsumedLoginState)} == {
        "state-recent",
        "state-live",
    }
    assert (await job.run()).deleted == dict.fromkeys(report.deleted, 0)


def client(client_id: str, age: timedelta) -> OAuthClient:
    return OAuthClient(client_id=client_id, info_json="{}", created_at=utcnow() - age)


async def test_retention_deletes_old_clients_nobody_used(sessions: SessionFactory) -> None:
    """Anyone may register a client; one no consent, code or token names is deleted after its days."""
    async with sessions() as session, session.begin():
        user = await identity.create_user(session, "owner", "a long password", cheap_password_hashing())
    old, young = 8 * DAY, 6 * DAY
    async with sessions() as session, session.begin():
        names = ["unused-old-1", "unused-old-2", "unused-old-3", "unused-young"]
        names += ["consented-old", "coded-old", "tokened-old"]
        session.add_all([client(name, young if name.endswith("young") else old) for name in names])
        await session.flush()
        session.add_all(
            [
                OAuthConsent(
                    user_id=user.id,
                    client_id="consented-old",
                    redirect_uri_hash="h",
                    redirect_uri="http://127.0.0.1/cb",
                ),
                AuthorizationCode(
                    code_hash="code-live",
                    client_id="coded-old",
                    user_id=user.id,
                    code_challenge="x",
                    redirect_uri="http://127.0.0.1/cb",
                    redirect_uri_provided_explicitly=True,
                    expires_at=utcnow() + DAY,
                ),
                Token(
                    id="tok_client",
                    token_hash="hash-tok_client",
                    kind="refresh",
                    grant_id="grant-client",
                    client_id="tokened-old",
                    user_id=user.id,
                    expires_at=utcnow() + DAY,
                ),
            ]
        )

    report = await RetentionJob(sessions, RetentionPolicy(unused_clients=7 * DAY, batch_rows=2)).run()

    assert report.deleted["oauth_client"] == 3
    assert {row.client_id for row in await rows(sessions, OAuthClient)} == {
        "unused-young",
        "consented-old",
        "coded-old",
        "tokened-old",
    }
    assert len(await rows(sessions, OAuthConsent)) == 1
    assert [row.code_hash for row in await rows(sessions, AuthorizationCode)] == ["code-live"]
    assert [row.id for row in await rows(sessions, Token)] == ["tok_client"]


async def test_retention_skips_while_another_replica_holds_its_lease(sessions: SessionFactory) -> None:
    await seed(sessions)
    assert await try_acquire(sessions, LEASE_NAME, "another-replica", timedelta(minutes=5))

    report = await RetentionJob(sessions, RetentionPolicy()).run()

    assert not report.ran
    assert len(await rows(sessions, StripeEvent)) == 2
