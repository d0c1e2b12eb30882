"""The service's Prometheus metrics, one `CollectorRegistry` per app instance.

Nothing here is module-global: the lifespan creates a `ServiceMetrics` and injects it, so apps
started side by side (tests start many in one process) never share a counter.

Label values are bounded: tool names are the registered tools (anything else is `unknown`), eras
are protocol versions, webhook types are Stripe's (only signed events are labelled by type),
plans come from the plan catalog.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from service.observability.loop_metrics import (
    CounterSlot,
    HistogramSlot,
    LoopCounter,
    LoopHistogram,
    LoopMetricsCollector,
)

TOOL_OUTCOMES = ("ok", "error", "elicitation", "cancelled")
ENTITLEMENT_SOURCES = ("cache", "database")
UNKNOWN = "unknown"
_ERA = re.compile(r"\d{4}-\d{2}-\d{2}")
_WEBHOOK_TYPE = re.compile(r"[a-z0-9_.]{1,64}")


def era_label(protocol_version: str | None) -> str:
    return protocol_version if protocol_version and _ERA.fullmatch(protocol_version) else UNKNOWN


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        # Written on every tool call, by the event loop only: see loop_metrics.
        self._tool_children: dict[tuple[str, str], tuple[CounterSlot, HistogramSlot]] = {}
        self._entitlement_children: dict[str, HistogramSlot] = {}
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
        self.elicitations_created = Counter(
            "paywall_elicitations_created",
            "Payment elicitations created, by protocol era.",
            ["era"],
            registry=r,
        )
        self.elicitations_completed = Counter(
            "paywall_elicitations_completed",
            "Payment elicitations completed by a confirmed payment, by protocol era.",
            ["era"],
            registry=r,
        )
        self.elicitations_expired = Counter(
            "paywall_elicitations_expired",
            "Payment elicitations marked expired, by protocol era.",
            ["era"],
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
            "(applied, ignored, duplicate, rejected, too_large, stripe_read_failed, error).",
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
        r.register(
            LoopMetricsCollector([self.tool_calls, self.tool_call_seconds, self.entitlement_check_seconds])
        )
        for era in KNOWN_PROTOCOL_VERSIONS:
            for counter in (
                self.elicitations_created,
                self.elicitations_completed,
                self.elicitations_expired,
            ):
                counter.labels(era=era)
        for source in ENTITLEMENT_SOURCES:
            self.entitlement_check_seconds.child(source)

    # -- tool calls ----------------------------------------------------------------------------

    def declare_tools(self, names: Iterable[str]) -> None:
        """Export a zero for each tool and outcome, so rates exist before the first call."""
        for name in names:
            for outcome in TOOL_OUTCOMES:
                self.tool_calls.child(name, outcome)

    def tool_call(self, tool: str, outcome: str, seconds: float) -> None:
        children = self._tool_children.get((tool, outcome))
        if children is None:
            children = (self.tool_calls.child(tool, outcome), self.tool_call_seconds.child(tool))
            self._tool_children[(tool, outcome)] = children
        children[0].inc()
        children[1].observe(seconds)

    # -- paywall -------------------------------------------------------------------------------

    def elicitation_created(self, era: str | None) -> None:
        self.elicitations_created.labels(era=era_label(era)).inc()

    def elicitation_completed(self, era: str | None) -> None:
        self.elicitations_completed.labels(era=era_label(era)).inc()

    def elicitation_expired(self, era: str | None) -> None:
        self.elicitations_expired.labels(era=era_label(era)).inc()

    def elicitations_settled(self, completed_eras: Iterable[str], expired_eras: Iterable[str]) -> None:
        """What a committed Stripe event or reconciliation step did to elicitations."""
        for era in completed_eras:
            self.elicitation_completed(era)
        for era in expired_eras:
            self.elicitation_expired(era)

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

    # -- sessions ------------------------------------------------------------------------------

    def count_legacy_sessions(self, count: Callable[[], int]) -> None:
        self.legacy_sessions.set_function(lambda: float(count()))
