"""Identifiers shaped like Stripe's: a type prefix and a random base62 tail.

Random (not sequential) so that tests cannot accidentally depend on ordering of ids, exactly as
they cannot against Stripe.
"""

from __future__ import annotations

import secrets
import string

_ALPHABET = string.ascii_letters + string.digits

# The length of the random part, per prefix, as observed on Stripe test-mode objects.
_TAIL = {
    "cs_test": 58,
    "whsec": 32,
    "cus": 14,
    "prod": 14,
    "si": 14,
    "req": 14,
    "bps": 24,
    "mtr_test": 32,
    "mtrusg_test": 32,
}


def _tail(length: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def new_id(prefix: str) -> str:
    """A fresh id such as `cus_Q2x...` or `cs_test_a1...`."""
    return f"{prefix}_{_tail(_TAIL.get(prefix, 24))}"


def new_secret(length: int = 32) -> str:
    """An opaque URL-safe secret for hosted page links (portal sessions)."""
    return secrets.token_urlsafe(length)
