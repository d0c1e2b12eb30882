"""Completion across processes: the webhook lands on replica B, the client waits on A (or C)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import mcp_types as t
import psycopg
import pytest
from sqlmodel import select

from service.audit.models import AuditEvent
from service.billing.models import StripeEvent, Subscription
from service.db.engine import create_engine, create_session_factory
from service.identity import service as identity
from tests.support.mcp_clients import ClientProbe, call_expecting_32042, payment_url, probed_client
from tests.support.payment import pay
from tests.support.polling import until
from tests.support.service import DEFAULT_PASSWORD, cheap_password_hashing

from .conftest import Cluster

pytestmark = pytest.mark.postgres

ARGS = {"values": [4, 2]}


async def user_with_token(cluster: Cluster, username: str) -> str:
    engine = create_engine(cluster.database_url)
    try:
        async with create_session_factory(engine)() as session, session.begin():
            await identity.create_user(session, username, DEFAULT_PASSWORD, cheap_password_hashing())
            issued = await identity.create_personal_token(
                session, username, resource=f"{cluster.a.base_url}/mcp", label="replicas", ttl=None
            )
        return issued.secret
    finally:
        await engine.dispose()


async def rows(cluster: Cluster, model: type) -> list:  # type: ignore[type-arg]
    engine = create_engine(cluster.database_url)
    try:
        async with create_session_factory(engine)() as session:
            return list((await session.exec(select(model))).all())
    finally:
        await engine.dispose()


async def test_webhook_on_b_notifies_the_session_on_a(cluster: Cluster) -> None:
    token = await user_with_token(cluster, "ann")
    probe = ClientProbe()
    async with probed_client(cluster.a.mcp_url, token, probe, mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "ascii_chart", ARGS)
        await pay(cluster.a, elicitation.url, "ann")
        assert await probe.wait_for_completion() == elicitation.elicitation_id
        result = await client.call_tool("ascii_chart", ARGS)
    assert not result.is_error
    assert probe.completed == [elicitation.elicitation_id]


async def test_modern_retry_waiting_on_a_is_released_by_a_webhook_on_b(cluster: Cluster) -> None:
    token = await user_with_token(cluster, "ben")
    async with probed_client(cluster.a.mcp_url, token, ClientProbe()) as client:
        first = await client.session.call_tool("ascii_chart", ARGS, allow_input_required=True)
        assert isinstance(first, t.InputRequiredResult)
        url = payment_url(first)
        retry = asyncio.create_task(
            client.session.call_tool(
                "ascii_chart",
                ARGS,
                allow_input_required=True,
                input_responses={"payment": t.ElicitResult(action="accept")},
                request_state=first.request_state,
            )
        )
        await pay(cluster.c, url, "ben")  # the payment page on yet another replica
        done = await retry
    assert isinstance(done, t.CallToolResult)
    assert not done.is_error


@asynccontextmanager
async def stripe_event_table_locked(
    cluster: Cluster,
) -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
    """Holds an exclusive lock on stripe_event, so a webhook transaction blocks inside the database."""
    from sqlalchemy.engine import make_url

    conninfo = (
        make_url(cluster.database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    )
    async with await psycopg.AsyncConnection.connect(conninfo) as connection:
        await connection.execute("LOCK TABLE stripe_event IN ACCESS EXCLUSIVE MODE")
        yield connection
        await connection.rollback()


async def wait_for_lock_waiter(connection: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
    async def waiting() -> bool:
        cursor = await connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        row = await cursor.fetchone()
        return bool(row and int(row[0]) > 0)  # type: ignore[call-overload]

    await until(waiting, "a webhook transaction waited on the lock", 20)


async def test_b_killed_mid_webhook_then_stripes_retry_applies_it_once(cluster: Cluster) -> None:
    token = await user_with_token(cluster, "cat")
    probe = ClientProbe()
    async with probed_client(cluster.a.mcp_url, token, probe, mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "ascii_chart", ARGS)
        async with stripe_event_table_locked(cluster) as locked:
            await pay(cluster.a, elicitation.url, "cat")
            await wait_for_lock_waiter(locked)
            await cluster.b.kill()  # dies inside the webhook's transaction
        await cluster.b.start()  # Stripe keeps retrying; the restarted B takes the delivery
        assert await probe.wait_for_completion(seconds=150) == elicitation.elicitation_id
        assert not (await client.call_tool("ascii_chart", ARGS)).is_error
    await cluster.sandbox.deliver_pending(within=60)
    completed = [row for row in await rows(cluster, StripeEvent) if row.type == "checkout.session.completed"]
    assert len(completed) == 1
    granted = [row for row in await rows(cluster, AuditEvent) if row.kind == "entitlement_granted"]
    assert len(granted) == 1
    [subscription] = await rows(cluster, Subscription)
    assert subscription.status == "active"


async def test_after_a_dies_its_client_reconnects_to_c_and_pays_there(cluster: Cluster) -> None:
    token = await user_with_token(cluster, "dot")
    async with probed_client(cluster.a.mcp_url, token, ClientProbe(), mode="legacy") as client:
        first = await call_expecting_32042(client, "ascii_chart", ARGS)
        await cluster.a.kill()
    probe = ClientProbe()
    async with probed_client(cluster.c.mcp_url, token, probe, mode="legacy") as client:
        again = await call_expecting_32042(client, "ascii_chart", ARGS)
        assert again.elicitation_id == first.elicitation_id, "the open elicitation survives its replica"
        await pay(cluster.c, again.url.replace(cluster.a.base_url, cluster.c.base_url), "dot")
        assert await probe.wait_for_completion() == again.elicitation_id
        result = await client.call_tool("ascii_chart", ARGS)
    assert not result.is_error


async def test_sigterm_stops_a_replica_gracefully_within_the_grace_period(cluster: Cluster) -> None:
    token = await user_with_token(cluster, "eva")
    async with probed_client(cluster.c.mcp_url, token, ClientProbe(), mode="legacy") as client:
        await client.call_tool("whoami", {})
        code = await cluster.c.terminate(grace=30)
    # uvicorn re-raises SIGTERM once its graceful shutdown is done, hence -15 rather than 0.
    assert code == -15, "exited on its own within the grace period, not killed"
    log = cluster.c.log()
    assert "Waiting for application shutdown." in log
    assert "Application shutdown complete." in log


async def test_without_notify_the_sweep_still_delivers(cluster: Cluster) -> None:
    """B publishes nothing (as behind PgBouncer); A's periodic sweep finds the owed completion."""
    await cluster.b.kill()
    cluster.b.env["COMPLETION_BUS"] = "local"
    await cluster.b.start()
    await cluster.a.kill()
    cluster.a.env["COMPLETION_SWEEP_SECONDS"] = "0.5"
    await cluster.a.start()
    token = await user_with_token(cluster, "fin")
    probe = ClientProbe()
    async with probed_client(cluster.a.mcp_url, token, probe, mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "ascii_chart", ARGS)
        await pay(cluster.a, elicitation.url, "fin")
        assert await probe.wait_for_completion() == elicitation.elicitation_id
