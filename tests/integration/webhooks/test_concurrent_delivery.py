"""Deliveries racing each other on PostgreSQL, where writers really run at once (SQLite serializes them)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg

from service.billing.models import StripeEvent, Subscription
from tests.integration.webhooks.test_stripe_webhook import event_body, post_webhook, signed
from tests.support.databases import DatabaseTemplates
from tests.support.service import run_service
from tests.support.subscriptions import subscribe


async def wait_until_a_writer_waits_on_a_lock(
    watcher: psycopg.AsyncConnection[tuple[object, ...]], delivery: asyncio.Task[object]
) -> None:
    deadline = time.monotonic() + 30
    while not delivery.done() and time.monotonic() < deadline:
        cursor = await watcher.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        row = await cursor.fetchone()
        if row is not None and row[0]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the delivery never waited on the other writer's row")


async def test_an_event_that_loses_the_race_to_insert_its_subscription_is_applied(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    """Another replica inserts the same new subscription first; this event is no duplicate for it."""
    database_url = pg_templates.fresh_url(tmp_path)
    async with run_service(database_url) as service:
        subscriber = await subscribe(service, "una")
        async with (
            await psycopg.AsyncConnection.connect(database_url) as other_replica,
            await psycopg.AsyncConnection.connect(database_url, autocommit=True) as watcher,
        ):
            # Make the subscription new to us again, then have "another replica" insert it in a
            # transaction it keeps open: the webhook's own insert of that row waits for it.
            await other_replica.execute(
                "CREATE TEMP TABLE forgotten AS SELECT * FROM subscription WHERE id = %s",
                (subscriber.subscription_id,),
            )
            await other_replica.execute(
                "DELETE FROM subscription WHERE id = %s", (subscriber.subscription_id,)
            )
            await other_replica.commit()
            await other_replica.execute("INSERT INTO subscription SELECT * FROM forgotten")

            body = event_body(
                "evt_raced",
                "customer.subscription.updated",
                {"id": subscriber.subscription_id, "object": "subscription"},
            )
            delivery = asyncio.create_task(post_webhook(service, body, signed(service, body)))
            await wait_until_a_writer_waits_on_a_lock(watcher, delivery)
            await other_replica.commit()
            status, answer = await delivery

        assert (status, answer["outcome"]) == (200, "applied")
        assert len(await service.rows(StripeEvent, id="evt_raced")) == 1
        [row] = await service.rows(Subscription, id=subscriber.subscription_id)
        assert row.status == "active"
