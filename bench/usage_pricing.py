"""`python -m bench.usage_pricing`: what a paid call paid for by usage costs next to a
subscription-gated one, on the same `paid` server, in interleaved slices.

Three callers of `ascii_chart` take turns on one server process (`bench/interleaved.py`):
`subscription` (a Team subscription bought in the sandbox: unlimited calls, the entitlement
cache), `credits` (no plan, prepaid credits: each call spends one in a write transaction) and
`metered` (a pay-as-you-go subscription: each call writes a usage row the reporter later sends
to Stripe). Each (mode, concurrency) cell gets fresh credit and metered users, so no call of one
cell can pass as a retry of another's (a 2026-07-28 request id repeats across generator
processes). The ratio is the median of per-cycle throughput ratios against `subscription`.

    .venv/bin/python -m bench.usage_pricing --concurrency 1 16 --cycles 10 --slice 0.5 [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench import procs, seed
from bench.cli import PRODUCTION_LOGGING
from bench.interleaved import cycle_count, slice_seconds
from bench.report import fmt, median, ratio_of, ratio_spread
from service.billing.models import StripeCustomer, Subscription
from service.billing.plans import DEFAULT_PLANS_FILE, CreditPack, PlanCatalog
from service.billing.usage import grant_credits
from service.db.engine import create_engine, create_session_factory
from service.db.metadata import utcnow
from service.identity import service as identity
from service.identity.models import User
from service.identity.secrets import new_id

MODES = {"legacy SSE": "legacy", "2026-07-28": "modern"}
CALLERS = ("subscription", "credits", "metered")
CREDITS = 1_000_000  # more than any cell spends
METERED_PLAN = "payg"


async def usage_callers(database_url: str, resource_url: str, cell: str) -> dict[str, str]:
    """A credit user and a pay-as-you-go user for one cell; their tokens by caller name."""
    catalog = PlanCatalog.load(DEFAULT_PLANS_FILE)
    assert catalog.get(METERED_PLAN) is not None, "the default catalog ships a pay-as-you-go plan"
    pack = CreditPack(
        id="bench", name="bench", lookup_key="bench", credits=CREDITS, amount=100, currency="usd"
    )
    engine = create_engine(database_url)
    sessions = create_session_factory(engine)
    tokens: dict[str, str] = {}
    try:
        async with sessions() as session, session.begin():
            for caller in ("credits", "metered"):
                user = User(id=new_id("usr"), username=f"{caller}-{cell}", password_hash="!")  # noqa: S106 - no password: token only
                session.add(user)
                await session.flush()
                issued = await identity.create_personal_token(
                    session, user.username, resource=resource_url, label="bench", ttl=None
                )
                tokens[caller] = issued.secret
                if caller == "credits":
                    await grant_credits(
                        session, user.id, pack, source=f"bench:{cell}", payment_intent_id=None
                    )
                    continue
                # Our record of a pay-as-you-go subscription; its meter events go to the sandbox.
                customer_id = f"cus_bench_{secrets.token_hex(6)}"
                session.add(StripeCustomer(user_id=user.id, customer_id=customer_id))
                session.add(
                    Subscription(
                        id=f"sub_bench_{secrets.token_hex(6)}",
                        user_id=user.id,
                        customer_id=customer_id,
                        plan_id=METERED_PLAN,
                        status="active",
                        current_period_end=utcnow() + timedelta(days=30),
                    )
                )
    finally:
        await engine.dispose()
    return tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--slice", type=float, default=0.5)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), default=list(MODES))
    parser.add_argument(
        "--report-interval",
        type=float,
        default=60.0,
        help="USAGE_REPORT_INTERVAL_SECONDS of the server (0: off)",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help=f"the server's database on the local PostgreSQL ({seed.POSTGRES_ADMIN_URL}), not SQLite",
    )
    parser.add_argument(
        "--quiet-logs", action="store_true", help="log at WARNING (no access lines): not as deployed"
    )
    options = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-usage-"))
    database = seed.postgres_database() if options.postgres else None
    options.database_url = database[0] if database is not None else None
    try:
        return _run(options, workdir)
    finally:
        procs.stop_all()
        if database is not None:
            seed.drop_postgres_database(database[1])


def _run(options: argparse.Namespace, workdir: Path) -> int:
    sandbox = procs.start_server("sandbox", procs.listener(), {"BENCH_KIND": "sandbox"}, workdir)
    procs.wait_ready(sandbox)
    api_base = f"http://127.0.0.1:{sandbox.port}"
    sock = procs.listener()
    port = procs.port_of(sock)
    resource_url = f"http://127.0.0.1:{port}/mcp"
    database_url = options.database_url or seed.sqlite_database(workdir, "paid")

    async def seeded() -> tuple[seed.Seeded, dict[str, dict[str, str]]]:
        stripe = await seed.Stripe.connect(api_base)
        try:
            base = await seed.seed(database_url, resource_url, stripe, webhook_customers=0, notify_accounts=0)
        finally:
            await stripe.aclose()
        cells = {
            f"{mode}-{concurrency}": await usage_callers(database_url, resource_url, f"{mode}-{concurrency}")
            for mode in options.modes
            for concurrency in options.concurrency
        }
        return base, cells

    base, cells = asyncio.run(seeded())
    settings: dict[str, Any] = {
        "database_url": database_url,
        "public_base_url": f"http://127.0.0.1:{port}",
        "port": port,
        # As deployed (and as `make bench` runs `paid`): JSON logs at INFO, metrics on a port of their own.
        **(PRODUCTION_LOGGING if not options.quiet_logs else {"log_level": "WARNING"}),
        "stripe_secret_key": seed.SANDBOX_KEY,
        "stripe_api_base": api_base,
        "stripe_sandbox_state_file": None,
        "max_legacy_sessions_per_user": 100_000,
        "usage_report_interval_seconds": options.report_interval,
    }
    server = procs.start_server(
        "paid",
        sock,
        {"BENCH_KIND": "paid", "BENCH_JSON": "0", "BENCH_SETTINGS": json.dumps(settings)},
        workdir,
    )
    procs.wait_ready(server)
    print(
        f"{'mode':12} {'c':>3} {'caller':12} {'calls/s':>8} {'p50 ms':>7} {'CPU us':>7}"
        "  vs subscription (cycles)"
    )
    for mode in options.modes:
        for concurrency in options.concurrency:
            tokens = {"subscription": base.entitled.token, **cells[f"{mode}-{concurrency}"]}
            slice_bound = slice_seconds(options.slice, concurrency)
            result = procs.run_generator(
                {
                    "kind": "interleaved",
                    "mode": MODES[mode],
                    "concurrency": concurrency,
                    "expect": "result",
                    "warmup": options.warmup,
                    "slice": options.slice,
                    "cycles": options.cycles,
                    "bound": len(CALLERS)
                    * (options.warmup + cycle_count(options.cycles, concurrency) * (slice_bound + 1.0)),
                    "targets": [
                        {"name": name, "port": port, "token": tokens[name], "server_pid": server.pid}
                        for name in CALLERS
                    ],
                }
            )
            cycles = {name: [{"rps": rate} for rate in result["targets"][name]["rates"]] for name in CALLERS}
            for name in CALLERS:
                measured = result["targets"][name]
                ratio = fmt(ratio_of(cycles[name], cycles["subscription"]), 2, "x")
                errors = (
                    f"  {measured['errors']} errors: {measured['first_error']}" if measured["errors"] else ""
                )
                # The server's CPU per call (all its threads), median over the caller's slices.
                cpu_per_call = median(
                    [
                        cores / rate * 1e6
                        for cores, rate in zip(measured["server_cpu"], measured["rates"], strict=True)
                        if rate
                    ]
                )
                print(
                    f"{mode:12} {concurrency:>3} {name:12} {fmt(median(measured['rates']), 0):>8} "
                    f"{fmt(measured['p50_ms'], 2):>7} {fmt(cpu_per_call, 0):>7}  {ratio} "
                    f"({ratio_spread(cycles[name], cycles['subscription'])}){errors}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
