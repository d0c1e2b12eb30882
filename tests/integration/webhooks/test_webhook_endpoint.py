"""`POST /webhooks/stripe` skips FastAPI while the service runs, and answers what the routed
endpoint answered: 405 for another method, 503 with Retry-After when the database is down."""

from __future__ import annotations

import httpx

from service.app import create_app
from service.webhooks.endpoints import WEBHOOK_PATH
from tests.integration.webhooks.test_stripe_webhook import event_body, signed
from tests.support.servers import bound_socket, port_of, serve
from tests.support.service import RunningService, make_settings, run_service

DEAD_DATABASE = "postgresql://nobody@127.0.0.1:1/none"


async def test_the_fast_path_exists_only_while_the_service_runs(database_url: str) -> None:
    sock = bound_socket()
    app = create_app(make_settings(database_url, port_of(sock)))
    assert WEBHOOK_PATH not in app.fast_paths
    async with serve(app, sock) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        assert WEBHOOK_PATH in app.fast_paths
        forged = await http.post(
            WEBHOOK_PATH, content=b"{}", headers={"Stripe-Signature": "t=1,v1=00", "X-Request-ID": "forged-1"}
        )
    assert WEBHOOK_PATH not in app.fast_paths
    assert forged.status_code == 400
    assert forged.json() == {"error": "invalid_request"}
    assert forged.headers["x-request-id"] == "forged-1"
    assert forged.headers["x-content-type-options"] == "nosniff"


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
