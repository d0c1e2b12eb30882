"""A running service whose Stripe throttles every request (429) or cannot be reached at all."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

from stripe_sandbox.sandbox import RateLimiter
from tests.support.servers import bound_socket, port_of
from tests.support.service import RunningService, run_service

StripeOutage = Literal["rate_limited", "unreachable"]
OUTAGES: tuple[StripeOutage, ...] = ("rate_limited", "unreachable")


@asynccontextmanager
async def service_with_stripe(database_url: str, outage: StripeOutage) -> AsyncIterator[RunningService]:
    if outage == "unreachable":
        with bound_socket() as closed:  # bound for the whole test, never listening: refused
            base = f"http://127.0.0.1:{port_of(closed)}"
            async with run_service(database_url, stripe_api_base=base) as service:
                yield service
        return
    async with run_service(database_url, stripe_sandbox_rate_limit=True) as service:
        # The sandbox's rate-limit mode with a bucket that never refills: every API request is a 429.
        service.sandbox.rate_limiter = RateLimiter(0)
        yield service
