"""Where the service sends a browser on Stripe's word: production allows Stripe's own pages only."""

from __future__ import annotations

import pytest
import stripe

from service.billing.plans import DEFAULT_PLANS_FILE, PlanCatalog
from service.billing.redirects import RedirectPolicy, UntrustedRedirect
from service.billing.stripe_gateway import StripeGateway

PRODUCTION = RedirectPolicy.for_environment(development=False)
DEVELOPMENT = RedirectPolicy.for_environment(development=True)


@pytest.mark.parametrize(
    "url",
    [
        "https://checkout.stripe.com/c/pay/cs_live_a1b2c3#fidkdWxOYHwnPyd1blpxYHZxWjA0",
        "https://billing.stripe.com/p/session/live_YWNjdF8xTjJ",
    ],
)
def test_production_follows_stripes_checkout_and_portal(url: str) -> None:
    assert PRODUCTION.checked(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example.com/c/pay/cs_live_a1b2c3",
        "http://checkout.stripe.com/c/pay/cs_live_a1b2c3",  # not https
        "https://checkout.stripe.com.evil.example/c/pay/cs_live",
        "https://checkout.stripe.com@evil.example/c/pay/cs_live",
        "https://user@checkout.stripe.com/c/pay/cs_live",
        "https://checkout.stripe.com:8443/c/pay/cs_live",
        "https://stripe.com/",
        "javascript:alert(1)",
        "//evil.example/",
        "",
        None,
    ],
)
def test_production_refuses_anything_else(url: str | None) -> None:
    with pytest.raises(UntrustedRedirect):
        PRODUCTION.checked(url)


def test_development_follows_the_sandbox_but_still_only_http() -> None:
    assert (
        DEVELOPMENT.checked("http://127.0.0.1:8001/c/pay/cs_test_1")
        == "http://127.0.0.1:8001/c/pay/cs_test_1"
    )
    with pytest.raises(UntrustedRedirect):
        DEVELOPMENT.checked("javascript:alert(1)")


async def test_the_gateway_refuses_a_checkout_session_pointing_elsewhere() -> None:
    catalog = PlanCatalog.load(DEFAULT_PLANS_FILE)
    gateway = StripeGateway.create("sk_live_unused", None, catalog, PRODUCTION)
    try:
        elsewhere = stripe.checkout.Session.construct_from(
            {"id": "cs_live_1", "object": "checkout.session", "url": "https://pay.evil.example/cs_live_1"},
            "sk_live_unused",
        )
        with pytest.raises(UntrustedRedirect, match=r"pay\.evil\.example"):
            gateway.checkout_url(elsewhere)
        stripes = stripe.checkout.Session.construct_from(
            {
                "id": "cs_live_2",
                "object": "checkout.session",
                "url": "https://checkout.stripe.com/c/pay/cs_live_2",
            },
            "sk_live_unused",
        )
        assert gateway.checkout_url(stripes) == "https://checkout.stripe.com/c/pay/cs_live_2"
    finally:
        await gateway.aclose()
