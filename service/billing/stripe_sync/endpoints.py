from __future__ import annotations

import logging
import time

import stripe
from fastapi import Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from service.audit.sampling import AuditSampler
from service.audit.service import AuditKind, record
from service.billing.stripe_sync.processor import WebhookProcessor
from service.billing.stripe_sync.stripe_events import StripeEventData
from service.billing.stripe_sync.verification import WebhookRejected, verify_event
from service.db.engine import SessionFactory
from service.dependencies import (
    get_metrics,
    get_session_factory,
    get_webhook_checks,
    get_webhook_processor,
    get_webhook_rejections,
)
from service.observability.metrics import ServiceMetrics
from service.observability.webhooks import webhook_processed

logger = logging.getLogger(__name__)

WEBHOOK_PATH = "/webhooks/stripe"


async def stripe_webhook(request: Request) -> JSONResponse:
    """POST /webhooks/stripe. A plain Starlette route (service/app.py): Stripe posts raw bytes that only the
    signature check may interpret, so FastAPI's parameter machinery would add cost and nothing else.
    `BodyLimit` in front has refused a body over MAX_WEBHOOK_BODY_BYTES before this reads it.
    """
    metrics = await get_metrics(request)
    received_at = time.time()
    started = time.perf_counter()
    payload = await request.body()
    try:
        event = verify_event(
            payload, request.headers.get("stripe-signature"), await get_webhook_checks(request)
        )
    except WebhookRejected as exc:
        await _rejected(
            metrics, await get_webhook_rejections(request), await get_session_factory(request), exc
        )
        # The same answer whatever failed: a forger learns nothing about which check stopped them.
        return JSONResponse({"error": "invalid_request"}, status_code=400)
    metrics.webhook_received(event.created, received_at)
    try:
        return await _process(await get_webhook_processor(request), metrics, event, started)
    finally:
        metrics.webhook_handled(event.type, time.perf_counter() - started)


async def _process(
    processor: WebhookProcessor, metrics: ServiceMetrics, event: StripeEventData, started: float
) -> JSONResponse:
    try:
        outcome = await processor.process(event)
    except stripe.StripeError as exc:
        metrics.webhook(event.type, "stripe_read_failed")
        # Reading the event's objects back from Stripe failed: nothing was stored, so Stripe's retry
        # will process the event afresh.
        logger.warning(
            "stripe webhook %s not processed, Stripe read failed: %s", event.id, type(exc).__name__
        )
        return JSONResponse({"error": "stripe_read_failed"}, status_code=502)
    except Exception:
        metrics.webhook(event.type, "error")
        raise
    webhook_processed(metrics, event, outcome, started)
    return JSONResponse({"received": True, "outcome": outcome.status})


async def _rejected(
    metrics: ServiceMetrics, rejections: AuditSampler, sessions: SessionFactory, exc: WebhookRejected
) -> None:
    """Counted every time; logged and audited only when the sampler says a row is due."""
    metrics.webhook_rejected(exc.reason)
    count = rejections.take(exc.reason)
    if count is None:
        return
    logger.warning("stripe webhook rejected (%s, %d since the last entry): %s", exc.reason, count, exc)
    try:
        async with sessions() as session, session.begin():
            await record(session, AuditKind.WEBHOOK_REJECTED, reason=exc.reason, detail=str(exc), count=count)
    except (OperationalError, InterfaceError, OSError) as error:
        # A stranger's request never gets a 5xx from a sample it cannot see; the metric still counts it.
        logger.warning("could not audit a rejected webhook: %s", type(error).__name__)


class WebhookEndpoint:
    """`stripe_webhook` as the ASGI app of its route, which takes every method (the catch-all MCP
    mount behind it would otherwise answer another method 404): 405 with `Allow` for any but POST."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response: Response
        if scope["method"] != "POST":
            response = JSONResponse(
                {"detail": "Method Not Allowed"}, status_code=405, headers={"Allow": "POST"}
            )
        else:
            response = await stripe_webhook(Request(scope, receive))
        await response(scope, receive, send)
