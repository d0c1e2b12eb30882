"""Stripe signature verification against every configured secret (rotation keeps old ones)."""

from __future__ import annotations

import stripe

SIGNATURE_TOLERANCE_SECONDS = 300


class WebhookRejected(Exception):
    """Not a genuine, fresh Stripe event; the message says why (safe to log, never the body)."""


def verify_event(payload: bytes, signature: str | None, secrets: list[str]) -> stripe.Event:
    if not signature:
        raise WebhookRejected("missing Stripe-Signature header")
    reason = "no webhook secret is configured"
    for secret in secrets:
        try:
            event: stripe.Event = stripe.Webhook.construct_event(
                payload, signature, secret, tolerance=SIGNATURE_TOLERANCE_SECONDS
            )
            return event
        except stripe.SignatureVerificationError as exc:
            reason = str(exc.user_message or exc)
            continue
        except ValueError as exc:
            raise WebhookRejected("payload is not valid JSON") from exc
    raise WebhookRejected(f"signature verification failed: {reason}")
