"""What the webhook endpoint reports once an event is processed: counters, latency, a log line."""

from __future__ import annotations

import logging
import time

from service.billing.stripe_sync.applier import Outcome
from service.billing.stripe_sync.stripe_events import StripeEventData
from service.observability import request_context
from service.observability.metrics import ServiceMetrics

logger = logging.getLogger("service.billing.stripe_sync")


def webhook_processed(
    metrics: ServiceMetrics, event: StripeEventData, outcome: Outcome, started: float
) -> None:
    """Count the event; if it completed elicitations, observe receipt-to-announcement latency.

    `started` is `time.perf_counter()` at receipt. By the time `process` returns, the completion
    has been published: the entitlement cache is invalidated, waiting calls are released and
    legacy sessions held here have been sent `notifications/elicitation/complete`.
    """
    metrics.webhook(event.type, outcome.status)
    metrics.elicitations_settled(outcome.completed_era_plans, outcome.expired_era_plans)
    completed = [item for change in outcome.changes for item in change.completed_elicitation_ids]
    for change in outcome.changes:
        request_context.bind(user_id=change.user_id)
    if completed:
        request_context.bind(elicitation_id=completed[0])
        metrics.completion_announced(time.perf_counter() - started)
    fields = {
        "stripe_event_id": event.id,
        "stripe_event_type": event.type,
        "outcome": outcome.status,
        "completed_elicitations": completed,
    }
    if not request_context.note(**fields):  # on the webhook request's access line when there is one
        logger.info("stripe webhook %s (%s): %s", event.id, event.type, outcome.status, extra=fields)
