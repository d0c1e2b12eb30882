"""`/webhooks/stripe` bounds: body size, JSON depth, non-finite numbers, timestamps, livemode, and what a
rejection costs."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from service.audit.models import AuditEvent
from service.billing.models import StripeEvent
from service.billing.stripe_sync.endpoints import WEBHOOK_PATH
from service.billing.stripe_sync.verification import WebhookChecks, WebhookRejected, verify_event
from service.settings.sections import key_is_live
from stripe_sandbox import sign_webhook_payload
from tests.integration.webhooks.test_stripe_webhook import REFUSED, event_body, post_webhook, signed
from tests.support.raw_http import post_unfinished
from tests.support.service import RunningService

INVOICE = {"id": "in_bounds", "object": "invoice"}


def rejections(service: RunningService, reason: str) -> float:
    value = service.runtime.metrics.registry.get_sample_value(
        "stripe_webhook_rejections_total", {"reason": reason}
    )
    return value or 0.0


async def test_many_forged_posts_leave_a_few_audit_rows_and_are_all_counted(service: RunningService) -> None:
    body = event_body("evt_flood", "invoice.created", INVOICE)
    answers = set()
    async with httpx.AsyncClient(base_url=service.base_url, timeout=10.0) as http:
        for index in range(200):
            response = await http.post(
                WEBHOOK_PATH,
                content=body,
                headers={"Stripe-Signature": f"t={int(time.time())},v1={index:064x}"},
            )
            answers.add((response.status_code, response.text))
    assert answers == {(400, json.dumps(REFUSED, separators=(",", ":")))}
    rows = await service.rows(AuditEvent, kind="webhook_rejected")
    assert 1 <= len(rows) <= 3
    assert json.loads(rows[0].detail)["reason"] == "bad_signature"
    assert rejections(service, "bad_signature") == 200


async def test_every_rejection_answers_the_same_generic_400(service: RunningService) -> None:
    body = event_body("evt_generic", "invoice.created", INVOICE)
    live = event_body("evt_generic_live", "invoice.created", INVOICE).replace(
        b'"livemode": false', b'"livemode": true'
    )
    cases = [
        (body, None),
        (body, "t=1,v1=00"),
        (body, signed(service, body, secret="whsec_other")),
        (b"\xff", signed(service, b"\xff")),
        (b"{", signed(service, b"{")),
        (live, signed(service, live)),
    ]
    answers = [await post_webhook(service, payload, signature) for payload, signature in cases]
    assert answers == [(400, REFUSED)] * len(cases)


async def test_a_signature_dated_beyond_the_future_skew_is_refused(service: RunningService) -> None:
    skew = service.settings.stripe.webhook_future_skew_seconds
    ahead = event_body("evt_future", "invoice.created", INVOICE)
    status, answer = await post_webhook(
        service, ahead, signed(service, ahead, at=int(time.time()) + skew + 3600)
    )
    assert (status, answer) == (400, REFUSED)
    assert await service.rows(StripeEvent, id="evt_future") == []
    assert rejections(service, "future_timestamp") == 1


async def test_a_signature_naming_two_timestamps_is_refused(service: RunningService) -> None:
    # Signed for a week ahead, behind a second `t` the skew check used to read instead.
    ahead = event_body("evt_two_stamps", "invoice.created", INVOICE)
    genuine = signed(service, ahead, at=int(time.time()) + 7 * 24 * 3600)
    status, answer = await post_webhook(service, ahead, f"t ={int(time.time())},{genuine}")
    assert (status, answer) == (400, REFUSED)
    assert await service.rows(StripeEvent, id="evt_two_stamps") == []
    assert rejections(service, "bad_signature") == 1
    # A clock a little ahead of ours is still fine.
    near = event_body("evt_near_future", "invoice.created", INVOICE)
    status, _ = await post_webhook(service, near, signed(service, near, at=int(time.time()) + 60))
    assert status == 200


async def test_a_live_event_is_refused_under_a_test_key(service: RunningService) -> None:
    body = event_body("evt_live", "invoice.created", INVOICE).replace(
        b'"livemode": false', b'"livemode": true'
    )
    status, answer = await post_webhook(service, body, signed(service, body))
    assert (status, answer) == (400, REFUSED)
    assert await service.rows(StripeEvent, id="evt_live") == []
    assert rejections(service, "livemode_mismatch") == 1


def test_a_live_key_takes_only_live_events() -> None:
    secret = "whsec_live_test"
    checks = WebhookChecks([secret], livemode=key_is_live("sk_live_abc"))
    test_event = event_body("evt_test_mode", "invoice.created", INVOICE)
    live_event = test_event.replace(b'"livemode": false', b'"livemode": true')
    now = int(time.time())
    assert verify_event(live_event, sign_webhook_payload(live_event, secret, now), checks).livemode
    with pytest.raises(WebhookRejected) as refused:
        verify_event(test_event, sign_webhook_payload(test_event, secret, now), checks)
    assert refused.value.reason == "livemode_mismatch"
    assert not key_is_live("sk_test_abc") and not key_is_live("sk_test_sandbox") and key_is_live("rk_live_x")


@pytest.mark.parametrize("depth", [100, 5000], ids=["over-the-limit", "past-python-recursion"])
async def test_deeply_nested_signed_json_is_a_400(service: RunningService, depth: int) -> None:
    deep = {"id": "in_deep", "object": "invoice", "nested": "__NESTED__"}
    body = event_body("evt_deep", "invoice.created", deep).replace(
        b'"__NESTED__"', b"[" * depth + b"]" * depth
    )
    status, answer = await post_webhook(service, body, signed(service, body))
    assert (status, answer) == (400, REFUSED)
    assert await service.rows(StripeEvent, id="evt_deep") == []
    assert rejections(service, "too_deep") == 1


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_a_signed_event_with_a_number_that_is_not_finite_is_not_json(
    service: RunningService, number: str
) -> None:
    invoice = {"id": "in_nan", "object": "invoice", "amount_due": "__NUMBER__"}
    body = event_body("evt_nan", "invoice.created", invoice).replace(b'"__NUMBER__"', number.encode())
    status, answer = await post_webhook(service, body, signed(service, body))
    assert (status, answer) == (400, REFUSED)
    assert await service.rows(StripeEvent, id="evt_nan") == []
    assert rejections(service, "not_json") == 1


async def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(service: RunningService) -> None:
    declared = service.settings.http.max_webhook_body_bytes + 1
    status, body = await post_unfinished(
        service.base_url, WEBHOOK_PATH, {"Stripe-Signature": "t=1,v1=00"}, declared_length=declared
    )
    assert status == 413
    assert json.loads(body)["error"] == "request_too_large"


async def test_a_chunked_body_over_the_limit_is_refused_before_it_ends(service: RunningService) -> None:
    chunks = [b" " * (64 * 1024)] * (service.settings.http.max_webhook_body_bytes // (64 * 1024) + 2)
    status, body = await post_unfinished(
        service.base_url, WEBHOOK_PATH, {"Stripe-Signature": "t=1,v1=00"}, chunks=chunks
    )
    assert status == 413
    assert json.loads(body)["error"] == "request_too_large"


async def test_a_signature_header_with_a_non_ascii_byte_is_a_bad_signature(service: RunningService) -> None:
    body = event_body("evt_latin1", "invoice.created", INVOICE)
    async with service.http() as http:
        for signature in (b"t=1,v1=\xe9", f"t={int(time.time())},v1=\xe9".encode("latin-1")):
            response = await http.post(WEBHOOK_PATH, content=body, headers={b"Stripe-Signature": signature})
            assert (response.status_code, response.json()) == (400, REFUSED)
    assert rejections(service, "bad_signature") == 2
    assert await service.rows(StripeEvent, id="evt_latin1") == []
