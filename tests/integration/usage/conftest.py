"""A migrated database on SQLite and on PostgreSQL for each usage test, with one user in it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from service.billing.models import StripeCustomer, Subscription
from service.billing.usage_postgres import PostgresDecisions
from service.db.engine import SessionFactory, create_engine, create_session_factory
from service.db.metadata import utcnow
from service.identity import service as identity
from tests.support.databases import TEMPLATE_FIXTURES, DatabaseTemplates
from tests.support.polling import until
from tests.support.service import cheap_password_hashing


@dataclass
class Ledger:
    engine: AsyncEngine
    sessions: SessionFactory
    user_id: str
    decisions: PostgresDecisions | None = None  # on PostgreSQL, the paid-call decisions' connections

    async def subscribe(self, plan_id: str) -> Subscription:
        """An active subscription of this ledger's user to `plan_id`, for the next 30 days."""
        row = Subscription(
            id=f"sub_{plan_id}",
            user_id=self.user_id,
            customer_id="cus_1",
            plan_id=plan_id,
            status="active",
            current_period_end=utcnow() + timedelta(days=30),
        )
        async with self.sessions() as session, session.begin():
            session.add(StripeCustomer(user_id=self.user_id, customer_id="cus_1"))
            session.add(row)
        return row

    async def add_user(self, username: str) -> str:
        passwords = cheap_password_hashing()
        try:
            async with self.sessions() as session, session.begin():
                user = await identity.create_user(session, username, "correct horse battery", passwords)
        finally:
            passwords.close()
        return user.id


@pytest.fixture(params=["sqlite", "postgres"])
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Ledger]:
    """Both backends whatever TEST_DATABASE says: the PostgreSQL suite leaves these tests out."""
    templates: DatabaseTemplates = request.getfixturevalue(TEMPLATE_FIXTURES[request.param])
    url = templates.fresh_url(tmp_path)
    engine = create_engine(url)
    sessions = create_session_factory(engine)
    made = Ledger(engine, sessions, "")
    made.user_id = await made.add_user("ada")
    try:
        async with AsyncExitStack() as stack:
            if request.param == "postgres":
                made.decisions = await stack.enter_async_context(PostgresDecisions.open(url))
            yield made
    finally:
        await engine.dispose()


@pytest.fixture
def postgres(ledger: Ledger) -> Ledger:
    """The ledger on PostgreSQL only, for races that only concurrent writers run into."""
    if ledger.engine.url.get_backend_name() != "postgresql":
        pytest.skip("PostgreSQL's decisions")
    return ledger


async def waiting_for_locks(ledger: Ledger, count: int) -> None:
    """Until `count` transactions on the ledger's database wait for a row lock (PostgreSQL)."""

    async def waiting() -> bool:
        async with ledger.engine.connect() as connection:
            rows = await connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
            return int(rows.scalar_one()) == count

    await until(waiting, f"{count} transactions wait for a lock")
