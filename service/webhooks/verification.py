"""Stripe signature verification against every configured secret (rotation keeps old ones)."""

from __future__ import annotations

import json

import stripe

from service.webhooks.events import MalformedEvent, StripeEventData

SIGNATURE_TOLERANCE_SECONDS = 300


class WebhookRejected(Exception):
    """Not a genuine, fresh Stripe event; the message says why (safe to log, never the body)."""


def verify_event(payload: bytes, signature: str | None, secrets: list[str]) -> StripeEventData:
    if not signature:
        raise WebhookRejected("missing Stripe-Signature header")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WebhookRejected("payload is not UTF-8") from exc
    reason = "no webhook secret is configured"
    for secret in secrets:
        try:
            stripe.WebhookSignature.verify_header(text, signature, secret, SIGNATURE_TOLERANCE_SECONDS)
        except stripe.SignatureVerificationError as exc:
            reason = str(exc.user_message or exc)
            continue
        try:
            return StripeEventData.from_json(json.loads(text))
        except MalformedEvent as exc:
            raise WebhookRejected(f"not a Stripe event: {exc}") from exc
        except ValueError as exc:
            raise WebhookRejected("payload is not valid JSON") from exc
    raise WebhookRejected(f"signature verification failed: {reason}")
