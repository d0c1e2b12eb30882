"""`python -m service stripe ...`: plans, reconciliation, event replay, and a standalone sandbox."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import stripe
from sqlalchemy.ext.asyncio import AsyncEngine

from service.billing.embedded_sandbox import SANDBOX_INSTALLED, SANDBOX_MISSING, create_app_for_settings
from service.billing.events import BillingEvents
from service.billing.plans import PlanCatalog, PlanCatalogError
from service.billing.stripe_gateway import PriceNotFound, StripeGateway
from service.billing.stripe_sync.reconciler import ReconcileReport, lease_holder
from service.billing.stripe_sync.stripe_events import StripeEventData
from service.billing.stripe_sync.wiring import StripeSync, build_stripe_sync
from service.billing.usage_reporter import UsageReporter
from service.cli_exit_codes import EXIT_LEASE_HELD, EXIT_USAGE_MISMATCH
from service.db.engine import create_engine_for, create_session_factory
from service.db.metadata import utcnow
from service.logging_setup import configure_logging
from service.paywall.bus import CompletionBus, InProcessBus, relay_billing_events
from service.paywall.payment_requests import ElicitationRequests
from service.paywall.pg_bus import PostgresBus
from service.paywall.tool_index import PaidToolIndex
from service.settings import Settings
from service.tool_packages import ToolPackageError, load_tools


class CommandFailed(Exception):
    """Printed as `error: ...`; the command exits 1."""


PROGRESS_EVERY_SECONDS = 1.0


class Progress:
    """One line on stderr at most every second: long runs show they are moving."""

    def __init__(self) -> None:
        self._last = time.monotonic()

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if now - self._last >= PROGRESS_EVERY_SECONDS:
            self._last = now
            print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class StripeContext:
    gateway: StripeGateway
    sync: StripeSync


def stripe_api_base(settings: Settings) -> str | None:
    if settings.stripe.embedded_sandbox:
        # The sandbox `make run` serves; these commands need the service running.
        return f"http://127.0.0.1:{settings.stripe_sandbox.port}"
    return settings.stripe.api_base


@asynccontextmanager
async def stripe_context(settings: Settings) -> AsyncIterator[StripeContext]:
    try:
        catalog = PlanCatalog.load(settings.billing.plans_file)
    except PlanCatalogError as exc:
        raise CommandFailed(str(exc)) from exc
    try:
        tools = PaidToolIndex(
            catalog,
            load_tools(
                settings.tools.packages, catalog, entry_points_enabled=settings.tools.entry_points
            ).paid_tools,
        )
    except ToolPackageError as exc:
        raise CommandFailed(str(exc)) from exc
    engine = create_engine_for(settings.database)
    gateway = StripeGateway.create(
        settings.stripe.secret_key.get_secret_value(), stripe_api_base(settings), catalog
    )
    events = BillingEvents()
    relay_billing_events(events, _bus_for(engine, settings))
    try:
        sync = build_stripe_sync(
            settings.billing,
            catalog,
            ElicitationRequests(tools),
            create_session_factory(engine),
            gateway,
            events,
        )
        yield StripeContext(gateway, sync)
    except stripe.APIConnectionError as exc:
        raise CommandFailed(_unreachable(settings)) from exc
    except (PriceNotFound, stripe.StripeError) as exc:
        raise CommandFailed(str(exc)) from exc
    finally:
        await gateway.aclose()
        await engine.dispose()


def _unreachable(settings: Settings) -> str:
    base = stripe_api_base(settings)
    if base is None:
        return "cannot reach Stripe at https://api.stripe.com: check the network and STRIPE_SECRET_KEY"
    if settings.stripe.embedded_sandbox:
        return (
            f"no Stripe sandbox at {base}: start the service (`make run` or `paid-mcp-service serve`, "
            "which starts it) or set STRIPE_API_BASE to a sandbox you run"
        )
    return f"nothing answers at STRIPE_API_BASE={base}: start that sandbox or correct the setting"


def _bus_for(engine: AsyncEngine, settings: Settings) -> CompletionBus:
    """On PostgreSQL, running replicas hear what these commands change; SQLite has none to tell."""
    if engine.dialect.name == "postgresql":
        return PostgresBus(engine, settings.database.url, on_reconnect=_nothing)
    return InProcessBus()


async def _nothing() -> None:
    return None


async def sync_plans(settings: Settings) -> int:
    async with stripe_context(settings) as context:
        for item, price_id, created in await context.gateway.sync_plans():
            verb = "created" if created else "exists "
            print(f"{verb} {item.id}\t{item.lookup_key}\t{item.price_label}\t{price_id}")
    return 0


async def reconcile(settings: Settings, *, as_json: bool = False) -> int:
    progress = Progress()

    def show(report: ReconcileReport) -> None:
        progress(
            f"reconciling: {report.checkouts} checkout sessions, {report.subscriptions} subscriptions, "
            f"{report.repaired} repaired so far"
        )

    async with stripe_context(settings) as context:
        report = await context.sync.reconciler.run(on_progress=show)
    if as_json:
        print(json.dumps(asdict(report)))
    elif not report.ran:
        print("another process holds the reconciliation lease; nothing done")
    else:
        print(
            f"checked {report.checkouts} checkout sessions ({report.checkouts_current} already reflected "
            f"here), replayed {report.events_replayed} missed refund or dispute events, and checked "
            f"{report.subscriptions} subscriptions; repaired {report.repaired}, "
            f"ignored {report.ignored}"
        )
    if not report.ran:
        return EXIT_LEASE_HELD
    if report.lease_lost:
        print("stopped early: the lease expired and another process holds it", file=sys.stderr)
        return EXIT_LEASE_HELD
    return 0


async def report_usage(settings: Settings, hours: int) -> int:
    """Send the metered calls not reported yet, then compare the last `hours` with Stripe's meters."""
    engine = create_engine_for(settings.database)
    try:
        async with stripe_context(settings) as context:
            catalog = PlanCatalog.load(settings.billing.plans_file)  # stripe_context has checked it
            reporter = UsageReporter(
                create_session_factory(engine),
                context.gateway,
                catalog,
                holder=lease_holder(),
                settle=timedelta(seconds=settings.billing.usage_report_settle_seconds),
            )
            report = await reporter.run()
            end = utcnow()
            mismatches = await reporter.compare(end - timedelta(hours=hours), end)
    finally:
        await engine.dispose()
    if not report.ran:
        print("another process holds the usage-report lease; nothing sent")
    else:
        print(f"sent {report.sent} meter events; {report.failed} failed and will be retried")
    for item in mismatches:
        print(f"mismatch {item.customer_id} {item.tool}: {item.ours} calls here, {item.stripes} at Stripe")
    if mismatches:
        return EXIT_USAGE_MISMATCH
    print(f"the last {hours} h of reported metered calls match Stripe's meter event summaries")
    return 0 if report.ran else EXIT_LEASE_HELD


async def replay_events(settings: Settings, since: datetime, *, as_json: bool = False) -> int:
    """Feeds Stripe's events since `since` through the webhook pipeline; stored ones are skipped."""
    counts: dict[str, int] = {}
    progress = Progress()
    async with stripe_context(settings) as context:
        events = await context.gateway.events_since(int(since.timestamp()))
        for done, event in enumerate(events, start=1):
            outcome = await context.sync.processor.process(StripeEventData.from_stripe(event))
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
            progress(f"replaying: {done} of {len(events)} events")
    if as_json:
        print(json.dumps({"events": sum(counts.values()), "outcomes": counts}))
    else:
        print(", ".join(f"{status}: {count}" for status, count in sorted(counts.items())) or "no events")
    return 0


def serve_sandbox(
    settings: Settings, host: str, port: int, webhook_urls: list[str], fd: int | None = None
) -> int:
    """The sandbox as its own process: one "Stripe" for any number of service replicas.

    With `fd`, on that inherited bound socket, whose port replaces `host` and `port`.
    """
    import uvicorn

    from service.web.inherited_socket import InheritedSocketError, inherited_listener

    if not SANDBOX_INSTALLED:
        print(f"configuration error: {SANDBOX_MISSING}", file=sys.stderr)
        return 2
    listener = None
    if fd is not None:
        try:
            listener = inherited_listener(fd)
        except InheritedSocketError as exc:
            print(f"configuration error: {exc}", file=sys.stderr)
            return 2
        host, port = listener.getsockname()[:2]
    configure_logging(settings.observability.log_level)
    app = create_app_for_settings(
        settings.stripe_sandbox, settings.stripe, f"http://127.0.0.1:{port}", webhook_urls
    )
    if listener is None:
        uvicorn.run(app, host=host, port=port, log_level=settings.observability.log_level.lower())
        return 0
    config = uvicorn.Config(app, host=host, port=port, log_level=settings.observability.log_level.lower())
    with listener:
        uvicorn.Server(config).run(sockets=[listener])
    return 0


def report_failures(exc: CommandFailed) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 1
