"""`POST /webhooks/stripe`: 405 for another method, 503 with Retry-After when the database is down."""

from __future__ import annotations

from service.billing.stripe_sync.endpoints import WEBHOOK_PATH
from tests.integration.webhooks.test_stripe_webhook import event_body, signed
from tests.support.service import RunningService, run_service

DEAD_DATABASE = "postgresql://nobody@127.0.0.1:1/none"


async def test_another_method_is_refused_with_allow(service: RunningService) -> None:
    async with service.http() as http:
        answer = await http.get(WEBHOOK_PATH)
    assert answer.status_code == 405
    assert answer.headers["allow"] == "POST"


async def test_a_dead_database_answers_503_and_stripe_retries() -> None:
    async with run_service(DEAD_DATABASE) as running, running.http() as http:
        body = event_body(
            "evt_dead_database", "checkout.session.expired", {"id": "cs_x", "object": "checkout.session"}
        )
        genuine = await http.post(
            WEBHOOK_PATH, content=body, headers={"Stripe-Signature": signed(running, body)}
        )
        forged = await http.post(WEBHOOK_PATH, content=body, headers={"Stripe-Signature": "t=1,v1=00"})
    assert genuine.status_code == 503
    assert genuine.headers["retry-after"] == "5"
    assert genuine.json()["error"] == "service_unavailable"
    # A forgery never needs the database: its audit sample is best effort, its answer the same 400.
    assert forged.status_code == 400
    assert forged.json() == {"error": "invalid_request"}
