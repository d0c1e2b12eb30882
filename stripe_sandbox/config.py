"""Sandbox configuration.

Kept as one frozen dataclass so the service can build it from its own settings and tests can build one
per test; every knob that only exists to make tests fast (retry backoff, timeouts) has a default that
is still short enough for `make run`, because nobody wants to wait an hour for Stripe-like retry
schedules on a laptop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

API_VERSION = "2026-10-28.endive"
"""The API version stripe-python 16.1 pins (`stripe._api_version._ApiVersion.CURRENT`).

Objects are shaped for this version; a test guards that it still matches the installed stripe-python.
"""


@dataclass(frozen=True)
class SandboxConfig:
    """Everything that differs between one sandbox instance and another."""

    api_key: str = "sk_test_sandbox"
    public_base_url: str = "http://127.0.0.1:8000/stripe-sandbox"
    webhook_endpoints: Sequence[tuple[str, str]] = ()
    persist_path: Path | None = None
    adversarial: bool = False

    # Webhook delivery. Stripe retries a failed delivery with exponential backoff for three days;
    # the "compressed" schedule keeps that shape within minutes (first retry after
    # `webhook_retry_base`, doubling up to `webhook_retry_max_delay`, giving up once
    # `webhook_retry_window` seconds have passed since the first attempt or after
    # `webhook_max_attempts`); "stripe" uses Stripe's own scale (hours, three days).
    webhook_timeout: float = 10.0
    webhook_retry_schedule: Literal["compressed", "stripe"] = "compressed"
    webhook_retry_base: float = 0.25
    webhook_retry_max_delay: float = 60.0
    webhook_retry_window: float = 900.0
    webhook_max_attempts: int = 64

    # Adversarial delivery: every event still arrives at least once, but possibly late, out of
    # order, and more than once, which is what Stripe documents may happen.
    adversarial_seed: int | None = None
    adversarial_max_delay: float = 0.3
    adversarial_duplicate_rate: float = 0.5

    # Failed renewal payments: retry after these many days (Stripe's Smart Retries default to a
    # handful of attempts over a couple of weeks); after the last failure the subscription gets
    # `final_failure_status`, mirroring the Dashboard setting "if all retries fail".
    renewal_retry_days: tuple[int, ...] = (3, 5, 7)
    final_failure_status: Literal["canceled", "unpaid"] = "canceled"

    # Checkout sessions expire after 24 hours by default, like Stripe's.
    checkout_session_ttl: int = 24 * 3600

    # Stripe does not guarantee delivery order: each delivery waits a random moment of up to
    # `webhook_order_jitter` seconds, so events emitted together arrive in varying order.
    # `webhook_ordered=True` sends them in the order they were emitted.
    webhook_ordered: bool = False
    webhook_order_jitter: float = 0.05

    # Optional rate limiting like test mode's (25 requests a second per key): 429 with Stripe's
    # `rate_limit` error, so a vendor's retry code gets exercised. Off by default.
    rate_limit: bool = False
    rate_limit_per_second: int = 25

    # Meter events are kept in memory (and in the state file) to be aggregated; past this many the
    # sandbox answers 400 rather than grow without bound.
    meter_event_limit: int = 50_000
    # A meter event stream session (API v2) lasts 15 minutes on Stripe.
    meter_event_session_seconds: int = 15 * 60

    extra_allowed_keys: tuple[str, ...] = field(default=())
    """Further secret keys accepted besides `api_key` (e.g. a restricted key in tests)."""


STRIPE_RETRY_BASE = 60.0
STRIPE_RETRY_MAX_DELAY = 12 * 3600.0
STRIPE_RETRY_WINDOW = 3 * 24 * 3600.0


def retry_schedule(config: SandboxConfig) -> tuple[float, float, float]:
    """(first backoff, largest backoff, give-up window) in seconds for the configured schedule."""
    if config.webhook_retry_schedule == "stripe":
        return STRIPE_RETRY_BASE, STRIPE_RETRY_MAX_DELAY, STRIPE_RETRY_WINDOW
    return config.webhook_retry_base, config.webhook_retry_max_delay, config.webhook_retry_window
