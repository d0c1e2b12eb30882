"""Builds the Stripe-to-us pipeline (applier, webhook processor, reconciler) for the app and the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from service.billing.plans import PlanCatalog
from service.billing.stripe_gateway import StripeGateway
from service.db.engine import SessionFactory
from service.observability.metrics import ServiceMetrics
from service.paywall.bus import CompletionBus
from service.paywall.tool_index import PaidToolIndex
from service.settings import BillingSettings
from service.webhooks.applier import StripeStateApplier
from service.webhooks.processor import WebhookProcessor
from service.webhooks.reconciler import Reconciler


@dataclass(frozen=True)
class StripeSync:
    processor: WebhookProcessor
    reconciler: Reconciler


def build_stripe_sync(
    billing: BillingSettings,
    catalog: PlanCatalog,
    tools: PaidToolIndex,
    sessions: SessionFactory,
    gateway: StripeGateway,
    bus: CompletionBus,
    metrics: ServiceMetrics | None = None,
) -> StripeSync:
    applier = StripeStateApplier(catalog, tools.satisfied_by)
    return StripeSync(
        processor=WebhookProcessor(sessions, gateway, applier, bus),
        reconciler=Reconciler(
            sessions,
            gateway,
            applier,
            bus,
            lookback=timedelta(days=billing.reconcile_lookback_days),
            steps_per_second=billing.reconcile_steps_per_second,
            metrics=metrics,
        ),
    )
