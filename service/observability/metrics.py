"""The service's Prometheus metrics, one `CollectorRegistry` per app instance.

Nothing here is module-global: the lifespan creates a `ServiceMetrics` and injects it, so apps
started side by side (tests start many in one process) never share a counter.

Label values are bounded: tool names are the registered tools (anything else is `unknown`), eras
are protocol versions, webhook types are Stripe's (only signed events are labelled by type),
plans come from the plan catalog, Stripe operations are the gateway's fixed set, HTTP routes are
route templates (or `other`), HTTP methods a fixed set. docs/operations.md lists every family.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable

from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from service import __version__
from service.observability.loop_metrics import (
    CounterSlot,
    HistogramSlot,
    LoopCounter,
    LoopHistogram,
    LoopMetricsCollector,
)

TOOL_OUTCOMES = ("ok", "error", "elicitation", "cancelled")
ENTITLEMENT_SOURCES = ("cache", "database")
RECONCILE_OUTCOMES = ("ran", "skipped_lease_held", "lease_lost", "error")
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNKNOWN = "unknown"
OTHER = "other"
_ERA = re.compile(r"\d{4}-\d{2}-\d{2}")
_WEBHOOK_TYPE = re.compile(r"[a-z0-9_.]{1,64}")


def era_label(protocol_version: str | None) -> str:
    return protocol_version if protocol_version and _ERA.fullmatch(protocol_version) else UNKNOWN


def _status_label(status: int) -> str:
    return str(status) if 100 <= status <= 599 else OTHER


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        # The process (memory, CPU, file descriptors), the interpreter and its garbage collector.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        Gauge(
            "paid_mcp_build_info", "Always 1; the running service's version.", ["version"], registry=r
        ).labels(version=__version__).set(1)
        # Written on every tool call, by the event loop only: see loop_metrics.
        self._tool_children: dict[tuple[str, str], tuple[CounterSlot, HistogramSlot, HistogramSlot]] = {}
        self._entitlement_children: dict[str, HistogramSlot] = {}
        self._http_children: dict[tuple[str, str, int], CounterSlot] = {}
        self._plans: frozenset[str] = frozenset()
        self.tool_calls = LoopCounter(
            "mcp_tool_calls",
            "MCP tools/call requests by tool and outcome (ok, error, elicitation: a payment link was "
            "given, cancelled: the client cancelled the call or went away).",
            ["tool", "outcome"],
        )
        self.tool_call_seconds = LoopHistogram(
            "mcp_tool_call_duration_seconds",
            "Time to answer a tools/call, including any wait for a payment.",
            ["tool"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600),
        )
        self.tool_execution_seconds = LoopHistogram(
            "mcp_tool_execution_seconds",
            "Time a tools/call spent outside the paywall: the tool itself, without the entitlement "
            "check or any wait for a payment, by tool and outcome.",
            ["tool", "outcome"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.elicitations_created = Counter(
            "paywall_elicitations_created",
            "Payment elicitations created, by protocol era and the plan offered.",
            ["era", "plan"],
            registry=r,
        )
        self.elicitations_completed = Counter(
            "paywall_elicitations_completed",
            "Payment elicitations completed by a confirmed payment, by protocol era and the plan offered.",
            ["era", "plan"],
            registry=r,
        )
        self.elicitations_expired = Counter(
            "paywall_elicitations_expired",
            "Payment elicitations marked expired, by protocol era and the plan offered.",
            ["era", "plan"],
            registry=r,
        )
        self.checkouts_created = Counter(
            "paywall_checkout_sessions_created",
            "Stripe Checkout Sessions created from a payment page, by plan.",
            ["plan"],
            registry=r,
        )
        self.webhooks = Counter(
            "stripe_webhooks",
            "Stripe webhook deliveries by event type and outcome "
            "(applied, ignored, duplicate, unverified, rejected, too_large, stripe_read_failed, error).",
            ["type", "outcome"],
            registry=r,
        )
        self.webhook_rejections = Counter(
            "stripe_webhook_rejections",
            "Webhook deliveries refused before processing, by reason (missing_signature, "
            "bad_signature, future_timestamp, not_utf8, not_json, too_deep, not_an_event, "
            "livemode_mismatch); each is also one `rejected` in stripe_webhooks.",
            ["reason"],
            registry=r,
        )
        self.webhook_to_completion = Histogram(
            "paywall_webhook_to_completion_seconds",
            "From receiving a Stripe webhook to having announced the elicitations it completed "
            "(entitlement cache invalidated, waiting calls released, legacy sessions notified).",
            registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.legacy_sessions = Gauge(
            "mcp_legacy_sessions_open",
            "Stateful (2025-era, Mcp-Session-Id) MCP sessions open on this replica.",
            registry=r,
        )
        self.entitlement_check_seconds = LoopHistogram(
            "paywall_entitlement_check_seconds",
            "Time to decide whether a user is entitled, by source (in-process cache or database).",
            ["source"],
            buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
        )
        self.webhook_event_age = Histogram(
            "stripe_webhook_event_age_seconds",
            "Receipt time minus the event's `created`, for signed events: how late Stripe delivers.",
            registry=r,
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400, 259200),
        )
        self.webhook_last_received = Gauge(
            "stripe_webhook_last_received_timestamp_seconds",
            "Unix time the last signed webhook event was received (0: none since start).",
            registry=r,
        )
        self.webhook_processing_seconds = Histogram(
            "stripe_webhook_processing_seconds",
            "From receiving a signed event to its answer: Stripe reads, the commit and announcing it, "
            "by event type.",
            ["type"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.webhook_commit_queue = Gauge(
            "stripe_webhook_commit_queue_depth",
            "Verified events waiting for the next group-commit transaction.",
            registry=r,
        )
        self.reconcile_runs = Counter(
            "stripe_reconcile_runs",
            "Reconciliation runs by outcome (ran, skipped_lease_held: another replica holds the "
            "lease, lease_lost: stopped when its lease expired, error).",
            ["outcome"],
            registry=r,
        )
        self.reconcile_repairs = Counter(
            "stripe_reconcile_repairs",
            "Objects reconciliation repaired: state that webhooks had left wrong.",
            registry=r,
        )
        self.reconcile_last_success = Gauge(
            "stripe_reconcile_last_success_timestamp_seconds",
            "Unix time a reconciliation run last completed on this replica (0: none since start).",
            registry=r,
        )
        self.stripe_api_seconds = Histogram(
            "stripe_api_request_duration_seconds",
            "Stripe API calls by operation, including stripe-python's retries, failed ones too.",
            ["operation"],
            registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 60),
        )
        self.stripe_api_errors = Counter(
            "stripe_api_errors",
            "Stripe API calls that failed, by operation and error (stripe-python's error class, or `other`).",
            ["operation", "error"],
            registry=r,
        )
        self.http_requests = LoopCounter(
            "http_requests",
            "HTTP requests by method, route (the matched route template; `other` when none matched) "
            "and status (499: the client went away first).",
            ["method", "route", "status"],
        )
        self.db_pool_checked_out = Gauge(
            "db_pool_checked_out_connections",
            "Connections of the database pool in use.",
            registry=r,
        )
        self.db_pool_max = Gauge(
            "db_pool_max_connections",
            "The most connections the database pool opens (pool size plus overflow).",
            registry=r,
        )
        r.register(
            LoopMetricsCollector(
                [
                    self.tool_calls,
                    self.tool_call_seconds,
                    self.tool_execution_seconds,
                    self.entitlement_check_seconds,
                    self.http_requests,
                ]
            )
        )
        self._declare_funnel()
        for source in ENTITLEMENT_SOURCES:
            self.entitlement_check_seconds.child(source)
        for outcome in RECONCILE_OUTCOMES:
            self.reconcile_runs.labels(outcome=outcome)

    # -- tool calls ----------------------------------------------------------------------------

    def declare_tools(self, names: Iterable[str]) -> None:
        """Export a zero for each tool and outcome, so rates exist before the first call."""
        for name in names:
            for outcome in TOOL_OUTCOMES:
                self.tool_calls.child(name, outcome)

    def tool_call(self, tool: str, outcome: str, seconds: float, paywall_seconds: float = 0.0) -> None:
        """`seconds` answering the call, of which `paywall_seconds` in the paywall (checks, waits)."""
        children = self._tool_children.get((tool, outcome))
        if children is None:
            children = (
                self.tool_calls.child(tool, outcome),
                self.tool_call_seconds.child(tool),
                self.tool_execution_seconds.child(tool, outcome),
            )
            self._tool_children[(tool, outcome)] = children
        children[0].inc()
        children[1].observe(seconds)
        children[2].observe(max(0.0, seconds - paywall_seconds))

    # -- paywall -------------------------------------------------------------------------------

    def declare_plans(self, plan_ids: Iterable[str]) -> None:
        """The catalog's plans: the values the funnel's `plan` label takes (anything else is `unknown`)."""
        self._plans = frozenset(plan_ids)
        self._declare_funnel()

    def _declare_funnel(self) -> None:
        for era in KNOWN_PROTOCOL_VERSIONS:
            for plan in self._plans:
                for counter in (
                    self.elicitations_created,
                    self.elicitations_completed,
                    self.elicitations_expired,
                ):
                    counter.labels(era=era, plan=plan)

    def _plan_label(self, plan: str | None) -> str:
        return plan if plan is not None and plan in self._plans else UNKNOWN

    def elicitation_created(self, era: str | None, plan: str | None) -> None:
        self.elicitations_created.labels(era=era_label(era), plan=self._plan_label(plan)).inc()

    def elicitation_completed(self, era: str | None, plan: str | None) -> None:
        self.elicitations_completed.labels(era=era_label(era), plan=self._plan_label(plan)).inc()

    def elicitation_expired(self, era: str | None, plan: str | None) -> None:
        self.elicitations_expired.labels(era=era_label(era), plan=self._plan_label(plan)).inc()

    def elicitations_settled(
        self, completed: Iterable[tuple[str, str]], expired: Iterable[tuple[str, str]]
    ) -> None:
        """What a committed Stripe event or reconciliation step did to elicitations: (era, plan) each."""
        for era, plan in completed:
            self.elicitation_completed(era, plan)
        for era, plan in expired:
            self.elicitation_expired(era, plan)

    def checkout_created(self, plan: str) -> None:
        self.checkouts_created.labels(plan=plan).inc()

    def entitlement_checked(self, source: str, seconds: float) -> None:
        child = self._entitlement_children.get(source)
        if child is None:
            child = self._entitlement_children[source] = self.entitlement_check_seconds.child(source)
        child.observe(seconds)

    # -- webhooks ------------------------------------------------------------------------------

    def webhook(self, event_type: str | None, outcome: str) -> None:
        label = event_type if event_type and _WEBHOOK_TYPE.fullmatch(event_type) else UNKNOWN
        self.webhooks.labels(type=label, outcome=outcome).inc()

    def webhook_rejected(self, reason: str) -> None:
        self.webhook("", "rejected")
        self.webhook_rejections.labels(reason=reason).inc()

    def completion_announced(self, seconds: float) -> None:
        self.webhook_to_completion.observe(seconds)

    def webhook_received(self, created: int, received_at: float) -> None:
        """A signed event arrived at `received_at` (Unix time); Stripe created it at `created`."""
        self.webhook_last_received.set(received_at)
        self.webhook_event_age.observe(max(0.0, received_at - created))

    def webhook_handled(self, event_type: str, seconds: float) -> None:
        label = event_type if _WEBHOOK_TYPE.fullmatch(event_type) else UNKNOWN
        self.webhook_processing_seconds.labels(type=label).observe(seconds)

    def count_webhook_queue(self, queued: Callable[[], int]) -> None:
        self.webhook_commit_queue.set_function(lambda: float(queued()))

    # -- reconciliation ------------------------------------------------------------------------

    def reconcile_ran(self, outcome: str, repaired: int = 0) -> None:
        self.reconcile_runs.labels(outcome=outcome).inc()
        if repaired:
            self.reconcile_repairs.inc(repaired)
        if outcome == "ran":
            self.reconcile_last_success.set(time.time())

    # -- Stripe API ----------------------------------------------------------------------------

    def stripe_call(self, operation: str, seconds: float, error: str | None) -> None:
        """One call of the gateway's fixed set of operations; `error` names its failure, if any."""
        self.stripe_api_seconds.labels(operation=operation).observe(seconds)
        if error is not None:
            self.stripe_api_errors.labels(operation=operation, error=error).inc()

    # -- HTTP ----------------------------------------------------------------------------------

    def http_request(self, method: str, route: str, status: int) -> None:
        """`route` is a route template or a fixed name, never a raw path."""
        key = (method if method in HTTP_METHODS else OTHER, route, status)
        child = self._http_children.get(key)
        if child is None:
            child = self._http_children[key] = self.http_requests.child(key[0], route, _status_label(status))
        child.inc()

    # -- resources -----------------------------------------------------------------------------

    def watch_db_pool(self, checked_out: Callable[[], int], most: int) -> None:
        self.db_pool_checked_out.set_function(lambda: float(checked_out()))
        self.db_pool_max.set(most)

    def watch_usage_decisions(self, waiting: Callable[[], int], deciding: Callable[[], int]) -> None:
        """Export the PostgreSQL paid-call decisions' queue: at most a few decide at once."""
        Gauge(
            "paywall_usage_decisions_in_flight",
            "Usage-priced calls being decided on PostgreSQL now (at most 4 per replica).",
            registry=self.registry,
        ).set_function(lambda: float(deciding()))
        Gauge(
            "paywall_usage_decisions_waiting",
            "Usage-priced calls waiting for their turn to be decided on PostgreSQL.",
            registry=self.registry,
        ).set_function(lambda: float(waiting()))

    def watch_completion_bus(self, connected: Callable[[], bool]) -> None:
        """Export `paywall_completion_bus_connected`; only a bus across replicas has a connection."""
        Gauge(
            "paywall_completion_bus_connected",
            "1 while the completion bus's LISTEN connection is up, 0 while it reconnects.",
            registry=self.registry,
        ).set_function(lambda: 1.0 if connected() else 0.0)

    # -- sessions ------------------------------------------------------------------------------

    def count_legacy_sessions(self, count: Callable[[], int]) -> None:
        self.legacy_sessions.set_function(lambda: float(count()))
