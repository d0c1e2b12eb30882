"""The checkout transaction alone: what a completed payment costs between the Stripe reads and the notice.

    .venv/bin/python -m bench.profile_checkout [--checkouts 300] [--top 0]

`make bench`'s webhook -> notice latency is the three Stripe reads (answered by the sandbox), then
one transaction: claim the event, lock the subscription, bind the customer, insert the
subscription, complete the elicitation, audit. This runs that transaction on its own, in process,
against a fresh PostgreSQL database: each `checkout.session.completed` is handed to the webhook
processor with its subscription already "read", so no Stripe and no HTTP are involved. Prints wall
and CPU time per transaction (p50/p90) and the SQL statements each one sends, and with `--top N`
cProfile's N heaviest functions. A development tool; `make bench` stays the measurement of record.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import secrets
import statistics
import time
from datetime import timedelta
from typing import Any

from bench import seed
from bench.profile_call import lifespan

WARMUP = 20


def _checkout_event(user_id: str, elicitation_id: str, index: int, now: int) -> Any:
    from service.billing.stripe_sync.stripe_events import StripeEventData

    session = {
        "id": f"cs_test_{index}",
        "object": "checkout.session",
        "mode": "subscription",
        "payment_status": "paid",
        "client_reference_id": user_id,
        "metadata": {"user_id": user_id, "elicitation_id": elicitation_id},
        "customer": f"cus_profile_{index}",
        "subscription": f"sub_profile_{index}",
        "invoice": f"in_profile_{index}",
    }
    return StripeEventData(f"evt_{secrets.token_hex(12)}", "checkout.session.completed", now, False, session)


def _subscription(index: int, now: int) -> dict[str, Any]:
    item = {
        "price": {"lookup_key": "paid_mcp_pro_monthly"},
        "current_period_start": now,
        "current_period_end": now + 30 * 86_400,
    }
    return {
        "id": f"sub_profile_{index}",
        "object": "subscription",
        "customer": f"cus_profile_{index}",
        "status": "active",
        "cancel_at_period_end": False,
        "metadata": {},
        "items": {"data": [item]},
        "latest_invoice": f"in_profile_{index}",
    }


async def main(checkouts: int, top: int) -> None:
    from sqlalchemy import event as sa_event

    from service.app import create_app
    from service.billing.models import StripeCustomer
    from service.billing.stripe_sync.applier import FreshSubscription
    from service.db.metadata import utcnow
    from service.identity import service as identity
    from service.paywall.models import Elicitation
    from service.process_tuning import ProcessTuning
    from service.settings import Settings

    database_url, db_name = seed.postgres_database()
    try:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            environment="development",
            database_url=database_url,
            public_base_url="http://127.0.0.1:8000",
            stripe_secret_key="sk_test_profile",  # noqa: S106 - never used: no Stripe call is made
            stripe_api_base="http://127.0.0.1:9",
            reconcile_interval_seconds=0,
            log_level="WARNING",
            password_hash_time_cost=1,  # hundreds of buyers are created; none signs in
            password_hash_memory_kib=64,
            password_hash_parallelism=1,
        )
        app = create_app(settings)
        task, queue = await lifespan(ProcessTuning(app, settings.tuning))  # as `serve` runs it
        runtime = app.state.runtime
        cases: list[tuple[str, str, int]] = []
        async with runtime.sessions() as session, session.begin():
            for index in range(checkouts + WARMUP):
                user = await identity.create_user(
                    session, f"buyer-{index}", "profile-password", runtime.passwords
                )
                session.add(StripeCustomer(user_id=user.id, customer_id=f"cus_profile_{index}"))
                elicitation_id = f"el_{secrets.token_hex(8)}"
                session.add(
                    Elicitation(
                        id=elicitation_id,
                        user_id=user.id,
                        plan_id="pro",
                        tool_name="ascii_chart",
                        protocol_era="2025-11-25",
                        expires_at=utcnow() + timedelta(hours=1),
                    )
                )
                cases.append((user.id, elicitation_id, index))
        statements: list[str] = []

        def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            statements.append(" ".join(statement.split())[:70])

        sa_event.listen(runtime.engine.sync_engine, "before_cursor_execute", count)
        profiler = cProfile.Profile() if top > 0 else None
        walls: list[float] = []
        cpus: list[float] = []
        now = int(time.time())
        for position, (user_id, elicitation_id, index) in enumerate(cases):
            event = _checkout_event(user_id, elicitation_id, index, now)
            fresh = FreshSubscription(_subscription(index, now), None)
            measured = position >= WARMUP
            if measured:
                statements.clear()
                if profiler is not None:
                    profiler.enable()
            started_wall, started_cpu = time.perf_counter(), time.thread_time()
            (outcome,) = await runtime.webhooks._store_and_apply_many([(event, fresh)])
            wall, cpu = time.perf_counter() - started_wall, time.thread_time() - started_cpu
            if profiler is not None:
                profiler.disable()
            if outcome.status != "applied" or not outcome.changes:
                raise RuntimeError(f"checkout {index} was not applied: {outcome}")
            if measured:
                walls.append(wall)
                cpus.append(cpu)
        await queue.put({"type": "lifespan.shutdown"})
        await task
    finally:
        seed.drop_postgres_database(db_name)
    walls.sort()
    cpus.sort()

    def p90(values: list[float]) -> float:
        return values[int(0.9 * (len(values) - 1))] * 1000

    print(
        f"{len(walls)} checkout transactions on PostgreSQL: "
        f"wall p50 {statistics.median(walls) * 1000:.2f} ms p90 {p90(walls):.2f} ms, "
        f"CPU p50 {statistics.median(cpus) * 1000:.2f} ms p90 {p90(cpus):.2f} ms"
    )
    print(f"{len(statements)} SQL statements in the last one:")
    for statement in statements:
        print(f"  {statement}")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.profile_checkout", description=__doc__)
    parser.add_argument("--checkouts", type=int, default=300)
    parser.add_argument("--top", type=int, default=0, help="cProfile's heaviest functions (0: no profile)")
    args = parser.parse_args()
    asyncio.run(main(args.checkouts, args.top))
