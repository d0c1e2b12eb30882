"""The sandbox's pages show amounts in Stripe's decimals, which differ from ISO 4217's for a few."""

from __future__ import annotations

import pytest

from stripe_sandbox.money import format_amount


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (900, "usd", "9.00 USD"),
        (-5, "eur", "-0.05 EUR"),
        (500, "jpy", "500 JPY"),
        (1250, "kwd", "1.250 KWD"),
        (1000, "isk", "10.00 ISK"),  # ISO 4217: no decimals; Stripe: two
        (100, "mga", "100 MGA"),  # ISO 4217: one decimal; Stripe: none
    ],
)
def test_amounts_are_shown_in_stripes_decimals(amount: int, currency: str, shown: str) -> None:
    assert format_amount(amount, currency) == shown
