"""The page for a Stripe call that failed: 503 with `Retry-After` when Stripe only throttled us or
could not be reached (both pass by themselves), 502 for any other answer (retrying will not help soon).
"""

from __future__ import annotations

import stripe
from fastapi.responses import Response

from service.web.pages import Pages

# Stripe's rate limit counts requests per second, and a connection failure has already been retried
# by stripe-python (STRIPE_NETWORK_RETRIES), so a few seconds is the shortest wait worth suggesting;
# the same as the database's 503 (service/web/database_unavailable.py).
STRIPE_RETRY_AFTER_SECONDS = 5


def is_transient(exc: stripe.StripeError) -> bool:
    """Stripe's rate limit (429) or no answer from Stripe at all: worth trying again in a moment."""
    return isinstance(exc, stripe.RateLimitError | stripe.APIConnectionError)


def stripe_unavailable(pages: Pages, exc: stripe.StripeError, *, title: str, failed: str) -> Response:
    """`failed`: what Stripe could not do, as the sentence's subject and verb ("Stripe could not ...")."""
    if is_transient(exc):
        response = pages.message(
            title,
            f"{failed} because it is busy or out of reach. Please try again in a moment.",
            status_code=503,
        )
        response.headers["Retry-After"] = str(STRIPE_RETRY_AFTER_SECONDS)
        return response
    return pages.message(title, f"{failed} just now. Please try again later.", status_code=502)
