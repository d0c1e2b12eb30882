"""Times every Stripe API call by operation and hands the figure to an observer (the metrics).

Billing defines the observer's shape and imports nothing of whoever implements it. Operations are
the gateway's fixed set of names; an error is stripe-python's error class name, or `other`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import stripe

OTHER_ERROR = "other"


class StripeCallObserver(Protocol):
    def stripe_call(self, operation: str, seconds: float, error: str | None) -> None: ...


def error_name(exc: Exception) -> str:
    """stripe-python's error class (a fixed set), or `other` for anything else."""
    kind = type(exc)
    if isinstance(exc, stripe.StripeError) and kind.__module__.split(".", 1)[0] == "stripe":
        return kind.__name__
    return OTHER_ERROR


class StripeCalls:
    def __init__(self, observer: StripeCallObserver | None = None) -> None:
        self._observer = observer

    @contextmanager
    def timed(self, operation: str) -> Iterator[None]:
        """Around one Stripe call (with stripe-python's retries); a cancelled call is not counted."""
        observer = self._observer
        if observer is None:
            yield
            return
        started = time.perf_counter()
        try:
            yield
        except Exception as exc:
            observer.stripe_call(operation, time.perf_counter() - started, error_name(exc))
            raise
        observer.stripe_call(operation, time.perf_counter() - started, None)
