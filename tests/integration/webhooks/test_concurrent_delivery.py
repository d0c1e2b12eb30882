"""Deliveries racing each other on PostgreSQL, where writers really run at once (SQLite serializes them)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psycopg

from service.audit.models import AuditEvent
from service.billing.models import StripeEvent, Subscription
from tests.integration.webhooks.test_stripe_webhook import event_body, post_webhook, signed
from tests.support.databases import DatabaseTemplates
from tests.support.polling import until
from tests.support.service import RunningService, run_service
from tests.support.subscriptions import subscribe


async def wait_until_a_writer_waits_on_a_lock(
    watcher: psycopg.AsyncConnection[tuple[object, ...]], delivery: asyncio.Task[object]
) -> None:
    async def waiting() -> bool:
        assert not delivery.done(), "the delivery finished without waiting on the other writer's row"
        cursor = await watcher.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        row = await cursor.fetchone()
        return bool(row is not None and row[0])

    await until(waiting, "the delivery waited on the other writer's row")


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


async def wait_until_queued(service: RunningService, count: int) -> None:
    async def queued() -> bool:
        return service.runtime.webhooks.queued_events >= count

    await until(queued, f"{count} events queued")


def subscription_updated(service: RunningService, event_id: str, subscription_id: str) -> bytes:
    return event_body(
        event_id, "customer.subscription.updated", {"id": subscription_id, "object": "subscription"}
    )


async def test_deliveries_waiting_behind_a_transaction_are_applied_together(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    database_url = pg_templates.fresh_url(tmp_path)
    async with run_service(database_url) as service:
        vera, walt = await subscribe(service, "vera"), await subscribe(service, "walt")
        deliveries: dict[str, asyncio.Task[tuple[int, dict[str, object]]]] = {}

        def deliver(key: str, body: bytes) -> None:
            deliveries[key] = asyncio.create_task(post_webhook(service, body, signed(service, body)))

        async with (
            await psycopg.AsyncConnection.connect(database_url) as holder,
            await psycopg.AsyncConnection.connect(database_url, autocommit=True) as watcher,
        ):
            await holder.execute(
                "SELECT 1 FROM subscription WHERE id = %s FOR UPDATE", (vera.subscription_id,)
            )
            deliver("first", subscription_updated(service, "evt_first", vera.subscription_id))
            await wait_until_a_writer_waits_on_a_lock(watcher, deliveries["first"])
            # These queue up while the first event's transaction waits for the held row.
            deliver("walt", subscription_updated(service, "evt_walt", walt.subscription_id))
            deliver("walt again", subscription_updated(service, "evt_walt", walt.subscription_id))
            deliver("vera", subscription_updated(service, "evt_vera", vera.subscription_id))
            deliver(
                "unrelated", event_body("evt_invoice", "invoice.created", {"id": "in_x", "object": "invoice"})
            )
            await wait_until_queued(service, 4)
            await holder.rollback()
            answers = {key: await task for key, task in deliveries.items()}

        outcomes = {key: (status, answer["outcome"]) for key, (status, answer) in answers.items()}
        # The two deliveries of one event race each other: either may be the one applied.
        assert sorted([outcomes.pop("walt"), outcomes.pop("walt again")]) == [
            (200, "applied"),
            (200, "duplicate"),
        ]
        assert outcomes == {
            "first": (200, "applied"),
            "vera": (200, "applied"),
            "unrelated": (200, "ignored"),
        }
        stored = {row.id: row for row in await service.rows(StripeEvent)}
        batch = [stored[event_id] for event_id in ("evt_walt", "evt_vera", "evt_invoice")]
        assert len({row.received_at for row in batch}) == 1  # one transaction claimed them all
        assert stored["evt_first"].received_at != batch[0].received_at
        assert (stored["evt_invoice"].outcome, stored["evt_walt"].outcome) == ("ignored", "applied")
        accepted = await service.rows(AuditEvent, kind="webhook_accepted")
        batch_ids = {"evt_first", "evt_walt", "evt_vera", "evt_invoice"}
        assert sorted(
            json.loads(row.detail)["event_id"]
            for row in accepted
            if json.loads(row.detail)["event_id"] in batch_ids
        ) == sorted(batch_ids)


async def test_a_batch_that_fails_is_applied_event_by_event(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    """One event of a batch loses a race; its neighbours must not be answered with its error."""
    database_url = pg_templates.fresh_url(tmp_path)
    async with run_service(database_url) as service:
        xena, yuri, zoe = [await subscribe(service, name) for name in ("xena", "yuri", "zoe")]
        async with (
            await psycopg.AsyncConnection.connect(database_url) as holder,
            await psycopg.AsyncConnection.connect(database_url) as other_replica,
            await psycopg.AsyncConnection.connect(database_url, autocommit=True) as watcher,
        ):
            await other_replica.execute(
                "CREATE TEMP TABLE forgotten AS SELECT * FROM subscription WHERE id = %s",
                (yuri.subscription_id,),
            )
            await other_replica.execute("DELETE FROM subscription WHERE id = %s", (yuri.subscription_id,))
            await other_replica.commit()
            await other_replica.execute("INSERT INTO subscription SELECT * FROM forgotten")
            await holder.execute(
                "SELECT 1 FROM subscription WHERE id = %s FOR UPDATE", (xena.subscription_id,)
            )

            def deliver(event_id: str, subscription_id: str) -> asyncio.Task[tuple[int, dict[str, object]]]:
                body = subscription_updated(service, event_id, subscription_id)
                return asyncio.create_task(post_webhook(service, body, signed(service, body)))

            first = deliver("evt_xena", xena.subscription_id)
            await wait_until_a_writer_waits_on_a_lock(watcher, first)
            raced, bystander = (
                deliver("evt_yuri", yuri.subscription_id),
                deliver("evt_zoe", zoe.subscription_id),
            )
            await wait_until_queued(service, 2)
            await holder.rollback()
            assert (await first)[1]["outcome"] == "applied"
            # The batch of yuri and zoe now waits on the other replica's uncommitted insert.
            await wait_until_a_writer_waits_on_a_lock(watcher, raced)
            await other_replica.commit()
            answers = [await raced, await bystander]

        assert [(status, answer["outcome"]) for status, answer in answers] == [
            (200, "applied"),
            (200, "applied"),
        ]
        stored = {row.id: row for row in await service.rows(StripeEvent)}
        assert {"evt_xena", "evt_yuri", "evt_zoe"} <= set(stored)
        assert stored["evt_yuri"].received_at != stored["evt_zoe"].received_at  # applied one by one
