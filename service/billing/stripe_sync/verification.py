"""Stripe signature verification against every configured secret (rotation keeps old ones)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import stripe

from service.billing.stripe_sync.stripe_events import MalformedEvent, StripeEventData
from service.json_bounds import JsonTooDeep, loads_bounded
from service.settings import StripeSettings
from service.settings.sections import key_is_live

SIGNATURE_TOLERANCE_SECONDS = 300


@dataclass(frozen=True)
class WebhookChecks:
    """What a genuine delivery must meet besides its signature."""

    secrets: list[str]
    livemode: bool  # the mode of our Stripe key: a live key takes only live events
    tolerance_seconds: int = SIGNATURE_TOLERANCE_SECONDS  # how old a signature may be
    future_skew_seconds: int = SIGNATURE_TOLERANCE_SECONDS  # how far ahead of our clock
    max_json_depth: int = 64

    @classmethod
    def from_settings(cls, stripe: StripeSettings, *, max_json_depth: int) -> WebhookChecks:
        return cls(
            secrets=stripe.webhook_secrets,
            livemode=key_is_live(stripe.secret_key.get_secret_value()),
            tolerance_seconds=stripe.webhook_tolerance_seconds,
            future_skew_seconds=stripe.webhook_future_skew_seconds,
            max_json_depth=max_json_depth,
        )


class WebhookRejected(Exception):
    """Not a genuine, fresh Stripe event. `reason` is a short fixed label (for metrics and the audit
    log), the message says more; both are safe to log and neither is ever sent back to the caller."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class _AmbiguousTimestamp(Exception):
    pass


def _signed_at(signature: str) -> int | None:
    """The header's timestamp; raises `_AmbiguousTimestamp` when it names more than one, since the
    skew check and stripe-python might then read different ones."""
    stamps = [
        value
        for name, _, value in (part.partition("=") for part in signature.split(","))
        if name.strip() == "t"
    ]
    if len(stamps) > 1:
        raise _AmbiguousTimestamp
    try:
        return int(stamps[0]) if stamps else None
    except ValueError:
        return None


def verify_event(payload: bytes, signature: str | None, checks: WebhookChecks) -> StripeEventData:
    if not signature:
        raise WebhookRejected("missing_signature", "missing Stripe-Signature header")
    if not signature.isascii():
        # Stripe's headers are ASCII; the SDK's str comparison would raise TypeError on anything else.
        raise WebhookRejected("bad_signature", "the Stripe-Signature header is not ASCII")
    try:
        signed_at = _signed_at(signature)
    except _AmbiguousTimestamp:
        raise WebhookRejected(
            "bad_signature", "the Stripe-Signature header has more than one timestamp"
        ) from None
    if signed_at is not None and signed_at > time.time() + checks.future_skew_seconds:
        raise WebhookRejected("future_timestamp", "the signature's timestamp is in the future")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WebhookRejected("not_utf8", "payload is not UTF-8") from exc
    reason = "no webhook secret is configured"
    for secret in checks.secrets:
        try:
            stripe.WebhookSignature.verify_header(text, signature, secret, checks.tolerance_seconds)
        except stripe.SignatureVerificationError as exc:
            reason = str(exc.user_message or exc)
            continue
        try:
            event = StripeEventData.from_json(loads_bounded(text, checks.max_json_depth))
        except MalformedEvent as exc:
            raise WebhookRejected("not_an_event", f"not a Stripe event: {exc}") from exc
        except JsonTooDeep as exc:
            raise WebhookRejected("too_deep", str(exc)) from exc
        except ValueError as exc:
            raise WebhookRejected("not_json", "payload is not valid JSON") from exc
        if event.livemode != checks.livemode:
            raise WebhookRejected(
                "livemode_mismatch",
                f"event {event.id} has livemode={event.livemode}, the Stripe key is "
                f"{'live' if checks.livemode else 'test'} mode",
            )
        return event
    raise WebhookRejected("bad_signature", f"signature verification failed: {reason}")
