"""Builds the Stripe-to-us pipeline (applier, webhook processor, reconciler) for the app and the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from service.billing.events import BillingEvents
from service.billing.plans import PlanCatalog
from service.billing.stripe_gateway import StripeGateway
from service.billing.stripe_sync.applier import StripeStateApplier
from service.billing.stripe_sync.payment_requests import PaymentRequests
from service.billing.stripe_sync.processor import WebhookProcessor
from service.billing.stripe_sync.reconciler import Reconciler
from service.db.engine import SessionFactory
from service.observability.metrics import ServiceMetrics
from service.settings import BillingSettings


@dataclass(frozen=True)
class StripeSync:
    processor: WebhookProcessor
    reconciler: Reconciler


def build_stripe_sync(
    billing: BillingSettings,
    catalog: PlanCatalog,
    requests: PaymentRequests[Any],
    sessions: SessionFactory,
    gateway: StripeGateway,
    events: BillingEvents,
    metrics: ServiceMetrics | None = None,
) -> StripeSync:
    """`requests`: the payment requests (elicitations) payments settle; `events`: where what
    changed is published once committed."""
    applier = StripeStateApplier(catalog, requests)
    processor = WebhookProcessor(sessions, gateway, applier, events)
    return StripeSync(
        processor=processor,
        reconciler=Reconciler(
            sessions,
            gateway,
            applier,
            requests,
            events,
            processor.process,
            lookback=timedelta(days=billing.reconcile_lookback_days),
            steps_per_second=billing.reconcile_steps_per_second,
            metrics=metrics,
        ),
    )
