"""The input-bound and retention settings have safe defaults and refuse values that disable them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.settings import Settings


def test_defaults() -> None:
    settings = Settings(_env_file=None)
    assert settings.http.max_request_body_bytes == 1024 * 1024
    assert settings.http.max_webhook_body_bytes == 512 * 1024
    assert settings.http.max_json_depth == 64
    assert settings.tools.max_output_bytes == 256 * 1024
    assert (settings.stripe.webhook_tolerance_seconds, settings.stripe.webhook_future_skew_seconds) == (
        300,
        300,
    )
    assert (settings.retention.audit_days, settings.retention.stripe_event_days) == (90, 30)
    assert settings.retention.expired_days == 7
    assert settings.paywall.max_payment_waits_per_user == 4


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_request_body_bytes", 0),
        ("max_webhook_body_bytes", 10**12),
        ("max_json_depth", 0),
        ("max_tool_output_bytes", 0),
        ("webhook_tolerance_seconds", 0),
        ("webhook_future_skew_seconds", 86_400),
        ("retention_stripe_event_days", 1),
        ("retention_batch_rows", 0),
        ("max_payment_waits_per_user", 0),
        ("max_payment_waits_per_user", 1001),
    ],
)
def test_out_of_range_values_are_refused(name: str, value: int) -> None:
    with pytest.raises(ValidationError):
        Settings(_env_file=None, **{name: value})  # type: ignore[arg-type]
