"""Structured logs: JSON lines with the request context, and nothing secret in them."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import TYPE_CHECKING

from stripe_sandbox import sign_webhook_payload
from tests.integration.observability.observed import captured_logs, json_lines, paid_legacy_flow
from tests.support.payment import GOOD_CARD
from tests.support.service import run_service

if TYPE_CHECKING:
    from service.identity.models import User


async def test_paid_tool_path_logs_carry_request_user_and_elicitation(database_url: str) -> None:
    with captured_logs() as stream:
        async with run_service(database_url) as service:
            flow = await paid_legacy_flow(service, "ada")
            await service.sandbox.deliver_pending(within=10)
            [user] = [user.id for user in await service.rows(_user_model(), username="ada")]
    lines = json_lines(stream)
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line)
        assert line["time"].endswith("+00:00")

    # The tool call is one line: the access line of the HTTP request that carried it.
    assert not [line for line in lines if line["logger"] in ("service.tools", "service.billing.stripe_sync")]
    [prompt] = [
        line for line in lines if line["logger"] == "service.access" and line.get("outcome") == "elicitation"
    ]
    assert prompt["tool"] == "ascii_chart" and prompt["protocol_version"] == "2025-11-25"
    assert prompt["tool_duration_ms"] <= prompt["duration_ms"]
    assert prompt["message"].endswith("tool ascii_chart: elicitation")
    assert prompt["http_method"] == "POST" and prompt["http_path"] == "/mcp"
    assert prompt["user_id"] == user
    assert prompt["elicitation_id"] == flow.elicitation_id
    assert prompt["request_id"]

    [completing] = [line for line in lines if line.get("completed_elicitations")]
    assert completing["logger"] == "service.access" and completing["http_path"] == "/webhooks/stripe"
    # Whichever fresh read of the subscription lands first completes it (checkout or invoice event).
    assert completing["stripe_event_type"] in ("checkout.session.completed", "invoice.paid")
    assert completing["user_id"] == user and completing["elicitation_id"] == flow.elicitation_id

    pay_page = [line for line in lines if line.get("http_path") == f"/pay/{flow.elicitation_id}"]
    assert pay_page and all(line["elicitation_id"] == flow.elicitation_id for line in pay_page)
    assert len({line["request_id"] for line in lines if "request_id" in line}) > 5


async def test_request_ids_are_echoed_or_generated(database_url: str) -> None:
    async with run_service(database_url) as service, service.http() as http:
        given = await http.get("/healthz", headers={"X-Request-ID": "trace-abc.123"})
        fresh = await http.get("/healthz")
        again = await http.get("/healthz")
        injected = await http.get("/healthz", headers={b"X-Request-ID": b'bad id "quote\xe2\x80\xa8'})
        mcp = await http.post("/mcp", json={}, headers={"X-Request-ID": "on-the-mcp-mount"})
    assert given.headers["x-request-id"] == "trace-abc.123"
    assert len(fresh.headers["x-request-id"]) == 32
    assert fresh.headers["x-request-id"] != again.headers["x-request-id"]
    assert len(injected.headers["x-request-id"]) == 32
    assert mcp.status_code == 401 and mcp.headers["x-request-id"] == "on-the-mcp-mount"


async def test_no_secret_reaches_a_log_line(database_url: str) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    with captured_logs(logging.DEBUG) as stream:
        async with run_service(database_url) as service:
            flow = await paid_legacy_flow(service, "eve")
            await service.sandbox.deliver_pending(within=10)
            # A signed event we wrote ourselves (so its signature and body are known), and a forged one.
            body = json.dumps(
                {
                    "id": f"evt_{uuid.uuid4().hex}",
                    "object": "event",
                    "type": "checkout.session.completed",
                    "created": int(time.time()),
                    "livemode": False,
                    "data": {
                        "object": {"id": "cs_x", "object": "checkout.session", "metadata": {"c": canary}}
                    },
                }
            ).encode()
            signature = sign_webhook_payload(
                body, service.settings.stripe.webhook_secrets[0], int(time.time())
            )
            forged = sign_webhook_payload(body, "whsec_forged", int(time.time()))
            async with service.http() as http:
                accepted = await http.post(
                    "/webhooks/stripe", content=body, headers={"Stripe-Signature": signature}
                )
                rejected = await http.post(
                    "/webhooks/stripe", content=body, headers={"Stripe-Signature": forged}
                )
                # A client that sends its own secrets where ids belong.
                echoed = await http.get(
                    "/healthz", headers={"X-Request-ID": flow.token, "Authorization": f"Bearer {flow.token}"}
                )
            logging.getLogger("service.test").warning(
                "a careless line: token=%s card %s cookie: session=%s",
                flow.token,
                GOOD_CARD,
                flow.session_cookie,
                extra={"authorization": f"Bearer {flow.token}", "body": body.decode()},
            )
    assert accepted.status_code == 200 and rejected.status_code == 400
    assert echoed.headers["x-request-id"] != flow.token
    output = stream.getvalue()
    assert "service.access" in output and "careless" in output, "the capture saw the service's logs"
    secrets = {
        "personal access token": flow.token,
        "session cookie": flow.session_cookie,
        "card number": GOOD_CARD,
        "webhook signature": signature.split("v1=")[1],
        "forged signature": forged.split("v1=")[1],
        "webhook secret": service.settings.stripe.webhook_secrets[0],
        "webhook body": canary,
    }
    for what, secret in secrets.items():
        assert secret not in output, f"the {what} reached the logs"
    for line in output.splitlines():
        json.loads(line)


def _user_model() -> type[User]:
    from service.identity.models import User

    return User
