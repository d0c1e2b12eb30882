"""Money is integer minor units; this turns an amount into text for people, and nothing else."""

from __future__ import annotations

# Stripe's zero-decimal currencies: the amount is already in whole units.
ZERO_DECIMAL_CURRENCIES = frozenset(
    {
        "bif",
        "clp",
        "djf",
        "gnf",
        "jpy",
        "kmf",
        "krw",
        "mga",
        "pyg",
        "rwf",
        "ugx",
        "vnd",
        "vuv",
        "xaf",
        "xof",
        "xpf",
    }
)


def format_amount(amount: int, currency: str) -> str:
    """'9.00 USD' for 900 usd, '500 JPY' for 500 jpy; integer arithmetic, no floats."""
    code = currency.upper()
    if currency.lower() in ZERO_DECIMAL_CURRENCIES:
        return f"{amount} {code}"
    sign = "-" if amount < 0 else ""
    major, minor = divmod(abs(amount), 100)
    return f"{sign}{major}.{minor:02d} {code}"
