"""Label values stay bounded whatever arrives: methods, plans and errors outside the fixed sets."""

from __future__ import annotations

import stripe

from service.billing.stripe_calls import StripeCalls, error_name
from service.observability.metrics import ServiceMetrics


def sample(metrics: ServiceMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_an_unknown_method_and_plan_get_a_fixed_label() -> None:
    metrics = ServiceMetrics()
    metrics.declare_plans(["pro"])
    for method in ("BREW", "PROPFIND", "GET"):
        metrics.http_request(method, "/readyz", 200)
    metrics.http_request("GET", "other", 1000)
    metrics.elicitation_created("2025-11-25", "pro")
    metrics.elicitation_created("2025-11-25", "gone_plan")
    assert sample(metrics, "http_requests_total", method="other", route="/readyz", status="200") == 2
    assert sample(metrics, "http_requests_total", method="GET", route="/readyz", status="200") == 1
    assert sample(metrics, "http_requests_total", method="GET", route="other", status="other") == 1
    assert sample(metrics, "paywall_elicitations_created_total", era="2025-11-25", plan="pro") == 1
    assert sample(metrics, "paywall_elicitations_created_total", era="2025-11-25", plan="unknown") == 1


def test_stripe_errors_are_named_by_class_or_other() -> None:
    # stripe-python leaves these errors' __init__ unannotated.
    card_error = stripe.CardError("declined", None, "card_declined")  # type: ignore[no-untyped-call]
    connection_error = stripe.APIConnectionError("down")  # type: ignore[no-untyped-call]
    assert error_name(card_error) == "CardError"
    assert error_name(connection_error) == "APIConnectionError"
    assert error_name(ValueError("ours")) == "other"

    class Subclassed(stripe.StripeError):
        pass

    assert error_name(Subclassed("not stripe's own class")) == "other"


def test_a_failed_call_is_timed_and_counted() -> None:
    metrics = ServiceMetrics()
    calls = StripeCalls(metrics)
    try:
        with calls.timed("create_customer"):
            raise stripe.RateLimitError("slow down")
    except stripe.RateLimitError:
        pass
    with calls.timed("create_customer"):
        pass
    assert sample(metrics, "stripe_api_request_duration_seconds_count", operation="create_customer") == 2
    assert (
        sample(metrics, "stripe_api_errors_total", operation="create_customer", error="RateLimitError") == 1
    )
