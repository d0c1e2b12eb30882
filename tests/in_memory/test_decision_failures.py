"""A paid call the database cannot decide now (a lock held past the lock timeout) does not run and
says why, and the same call goes through once the database answers again."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import psycopg
import pytest
from sqlalchemy.engine import make_url

from service.billing.usage import credit_balance
from service.billing.usage_models import CreditEntry
from service.db.engine import libpq_url
from tests.support import factories
from tests.support.in_memory import InMemoryService, run_in_memory
from tests.support.polling import until

CHART = "ascii_chart"
CHART_ARGS = {"values": [3, 1, 2], "labels": ["a", "b", "c"]}


@pytest.fixture
async def impatient(database_url: str) -> AsyncIterator[InMemoryService]:
    async with run_in_memory(database_url, database_lock_timeout_seconds=0.2) as running:
        yield running


@contextmanager
def held_elsewhere(database_url: str, user_id: str) -> Iterator[None]:
    """The user's credit balance locked by another session: SQLite's write lock, or the row."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        holder = sqlite3.connect(str(url.database), isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            yield
        finally:
            holder.close()
        return
    with psycopg.connect(libpq_url(database_url)) as row_holder:
        row_holder.execute("SELECT balance FROM credit_balance WHERE user_id = %s FOR UPDATE", (user_id,))
        yield


async def test_a_call_behind_a_stuck_lock_fails_with_a_clear_error_and_runs_again_later(
    impatient: InMemoryService, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    ivy = await impatient.add_user("ivy")
    granted = await factories.credits(impatient, ivy)
    async with impatient.client(ivy, mode="legacy") as client:
        with held_elsewhere(database_url, ivy.id), caplog.at_level(logging.WARNING, "service.paywall.gate"):
            stuck = await client.call_tool(CHART, CHART_ARGS)
        [warning] = [record for record in caplog.records if record.name == "service.paywall.gate"]
        # The operator learns which error it was; the caller does not.
        logged = warning.getMessage()
        assert "database unavailable (" in logged and "lock" in logged.lower(), logged
        assert stuck.is_error
        [content] = stuck.content
        assert getattr(content, "text", "") == (
            f"{CHART} did not run: the database is unavailable, so its payment could not be checked. "
            "Try again in a few seconds."
        )
        async with impatient.runtime.sessions() as session:
            assert await credit_balance(session, ivy.id) == granted, "nothing spent"

        again = await client.call_tool(CHART, CHART_ARGS)
    assert not again.is_error, again
    async with impatient.runtime.sessions() as session:
        assert await credit_balance(session, ivy.id) == granted - 1


async def test_billing_status_says_when_the_database_cannot_answer(
    impatient: InMemoryService, database_url: str
) -> None:
    if make_url(database_url).get_backend_name() != "postgresql":
        pytest.skip("on SQLite nothing holds a read up; PostgreSQL's table lock does")
    jay = await impatient.add_user("jay")
    async with impatient.client(jay, mode="legacy") as client:
        with psycopg.connect(libpq_url(database_url)) as holder:
            holder.execute("LOCK TABLE subscription IN ACCESS EXCLUSIVE MODE")
            stuck = await client.call_tool("billing_status", {})
        again = await client.call_tool("billing_status", {})
    assert stuck.is_error
    [content] = stuck.content
    assert getattr(content, "text", "").endswith(
        "billing_status is not available right now: the database is unavailable. Try again in a few seconds."
    )
    assert not again.is_error, again


async def test_a_call_cancelled_while_its_decision_waits_is_not_paid_for(database_url: str) -> None:
    """The decision runs to its end (on SQLite one queued for a batch commits anyway); the call it
    was for is gone, so what it spent is given back."""
    if make_url(database_url).get_backend_name() != "postgresql":
        pytest.skip("a decision seen waiting for a row lock in pg_stat_activity")
    async with run_in_memory(database_url, database_lock_timeout_seconds=60) as memory:
        kay = await memory.add_user("kay")
        granted = await factories.credits(memory, kay)
        async with memory.client(kay, mode="legacy") as client:
            watching = psycopg.connect(libpq_url(database_url), autocommit=True)
            with held_elsewhere(database_url, kay.id), watching as watcher:

                async def waiting() -> bool:
                    row = watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'paid-call-decisions'"
                        " AND wait_event_type = 'Lock'"
                    ).fetchone()
                    return row is not None and row[0] == 1

                call = asyncio.create_task(client.call_tool(CHART, CHART_ARGS))
                await until(waiting, "the decision waits for the balance row")
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call

            # The lock is free: the decision commits, and the cancelled call gives it back.
            async def given_back() -> bool:
                entries = await memory.rows(CreditEntry, user_id=kay.id)
                return any(entry.source.startswith("returned:") for entry in entries)

            await until(given_back, "the spent credit given back")
            async with memory.runtime.sessions() as session:
                assert await credit_balance(session, kay.id) == granted
