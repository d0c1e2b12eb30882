"""Amounts on the sandbox's pages, in each currency's decimals as Stripe counts them.

Stripe's amounts are integers in the currency's smallest unit: a list of zero-decimal currencies
and one of three-decimal currencies, every other currency two decimals (Stripe's "Supported
currencies" page). The service keeps ISO 4217's table (service/money.py) and refuses a catalog
where the two disagree.
"""

from __future__ import annotations

STRIPE_ZERO_DECIMAL = frozenset(
    (
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
    )
)
STRIPE_THREE_DECIMAL = frozenset(("bhd", "jod", "kwd", "omr", "tnd"))


def decimals(currency: str) -> int:
    code = currency.lower()
    return 0 if code in STRIPE_ZERO_DECIMAL else 3 if code in STRIPE_THREE_DECIMAL else 2


def format_amount(amount: int, currency: str) -> str:
    """'9.00 USD' for 900 usd, '500 JPY' for 500 jpy, '1.250 KWD' for 1250 kwd; no floats."""
    code = currency.upper()
    digits = decimals(currency)
    if digits == 0:
        return f"{amount} {code}"
    sign = "-" if amount < 0 else ""
    major, minor = divmod(abs(amount), 10**digits)
    return f"{sign}{major}.{minor:0{digits}d} {code}"
