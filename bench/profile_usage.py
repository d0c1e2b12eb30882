"""What one paid-call decision costs in the database: statements and time per call.

    .venv/bin/python -m bench.profile_usage [--calls 2000] [--concurrency 1 16] [--postgres URL] [--profile]

Drives `Admission.admit` straight (no HTTP) for a credit user and a pay-as-you-go user on a freshly
migrated database: SQLite in a temporary folder by default, or the PostgreSQL database given. Counts
the SQL statements the engine runs (its `before_cursor_execute` event; not those sent on a driver
connection, as PostgreSQL's one-statement decisions are) per decision, and the
wall-clock time per decision at each concurrency. `--profile` prints cProfile's view of the credit
decisions at concurrency 1.
A development tool; `python -m bench.usage_pricing` is the measurement of record.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import secrets
import tempfile
import time
from collections import Counter
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event

from service.billing.models import StripeCustomer, Subscription
from service.billing.plans import DEFAULT_PLANS_FILE, CreditPack, PlanCatalog
from service.billing.usage import PaidCall, grant_credits
from service.billing.usage_postgres import PostgresDecisions
from service.db.engine import create_engine, create_session_factory
from service.db.metadata import utcnow
from service.db.migrations import upgrade_to_head
from service.db.wal import CHECKPOINT_SECONDS, WalCheckpoints
from service.identity.models import User
from service.identity.secrets import new_id
from service.paywall.admission import Admission
from service.paywall.entitlements import Entitlements

TOOL = "ascii_chart"


async def _users(sessions: Any) -> dict[str, str]:
    pack = CreditPack(
        id="bench", name="bench", lookup_key="bench", credits=1_000_000, amount=1, currency="usd"
    )
    users: dict[str, str] = {}
    async with sessions() as session, session.begin():
        for caller in ("credits", "metered"):
            user = User(id=new_id("usr"), username=f"{caller}-{secrets.token_hex(4)}", password_hash="!")  # noqa: S106
            session.add(user)
            await session.flush()
            users[caller] = user.id
            if caller == "credits":
                await grant_credits(session, user.id, pack, source=f"bench:{user.id}", payment_intent_id=None)
                continue
            customer_id = f"cus_bench_{secrets.token_hex(6)}"
            session.add(StripeCustomer(user_id=user.id, customer_id=customer_id))
            session.add(
                Subscription(
                    id=f"sub_bench_{secrets.token_hex(6)}",
                    user_id=user.id,
                    customer_id=customer_id,
                    plan_id="payg",
                    status="active",
                    current_period_end=utcnow() + timedelta(days=30),
                )
            )
    return users


async def _run(options: argparse.Namespace) -> None:
    url = options.postgres or f"sqlite:///{Path(tempfile.mkdtemp(prefix='profile-usage-')) / 'usage.db'}"
    upgrade_to_head(url)
    engine = create_engine(url)
    statements: Counter[str] = Counter()

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements[statement.split(None, 1)[0].upper()] += 1

    sessions = create_session_factory(engine)
    users = await _users(sessions)
    catalog = PlanCatalog.load(DEFAULT_PLANS_FILE)
    entitlements = Entitlements(sessions, grace=timedelta(days=3), cache_seconds=60.0)
    # As the app runs it: on SQLite the log is checkpointed by a timer, off the event loop's thread.
    wal = WalCheckpoints.for_engine(engine)
    stack = AsyncExitStack()
    decisions = await stack.enter_async_context(PostgresDecisions.open(url)) if options.postgres else None
    admission = Admission(sessions, catalog, entitlements, wal=wal, postgres=decisions)
    checkpoints = asyncio.create_task(_checkpoint_timer(wal)) if wal is not None else None
    plan_ids = frozenset(plan.id for plan in catalog.plans_unlocking(TOOL))
    for name, user_id in users.items():
        await entitlements.plans_of(user_id)  # the cache the subscription path reads, warmed
        for concurrency in options.concurrency:
            calls = options.calls

            async def one(index: int, user_id: str = user_id, name: str = name) -> None:
                verdict = await admission.admit(PaidCall(user_id, TOOL, secrets.token_hex(32)), plan_ids)
                assert verdict.allowed, (name, index)

            async def worker(start: int, concurrency: int = concurrency, calls: int = calls) -> None:
                for index in range(start, calls, concurrency):
                    await one(index)

            statements.clear()
            profiler = (
                cProfile.Profile() if options.profile and concurrency == 1 and name == "credits" else None
            )
            started = time.perf_counter()
            cpu_started = time.process_time()
            if profiler is not None:
                profiler.enable()
            await asyncio.gather(*(worker(start) for start in range(concurrency)))
            if profiler is not None:
                profiler.disable()
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
            per_call = (
                ", ".join(f"{kind} {count / calls:.2f}" for kind, count in sorted(statements.items()))
                or "none through the engine (sent on its driver connections)"
            )
            print(
                f"{name:8} c={concurrency:<3} {elapsed / calls * 1e6:8.0f} us/call "
                f"({cpu / calls * 1e6:5.0f} us CPU)  "
                f"statements/call: {per_call}",
                flush=True,
            )
            if profiler is not None:
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(options.top)
    if checkpoints is not None:
        checkpoints.cancel()
    admission.close()
    await stack.aclose()
    await engine.dispose()


async def _checkpoint_timer(wal: WalCheckpoints) -> None:
    while True:
        await asyncio.sleep(CHECKPOINT_SECONDS)
        await wal.run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--postgres", help="a PostgreSQL URL to a database of its own (migrated here)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=30)
    asyncio.run(_run(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
