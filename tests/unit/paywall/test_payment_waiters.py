"""The per-user cap on calls waiting for a payment: places are per user and come back when a wait ends."""

from __future__ import annotations

import pytest

from service.paywall.bus import PaymentWaiters


def test_a_user_holds_at_most_so_many_places_and_others_are_not_affected() -> None:
    waiters = PaymentWaiters(max_per_user=2)
    with waiters.place("ada") as first, waiters.place("ada") as second, waiters.place("ada") as third:
        assert (first, second, third) == (True, True, False)
        with waiters.place("bob") as other:
            assert other
    with waiters.place("ada") as again:
        assert again, "every place came back, the refused one held none"


def test_a_wait_that_fails_gives_its_place_back() -> None:
    waiters = PaymentWaiters(max_per_user=1)

    def wait_failing() -> None:
        with waiters.place("ada") as placed:
            assert placed
            raise RuntimeError("the database is unavailable")

    with pytest.raises(RuntimeError):
        wait_failing()
    with waiters.place("ada") as placed:
        assert placed
