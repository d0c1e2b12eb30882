"""Reading fields of Stripe objects that may arrive as stripe-python objects, plain dicts or bare ids."""

from __future__ import annotations

from typing import Any


def field_of(obj: Any, name: str) -> Any:
    """A field of a Stripe object or plain dict; None when absent."""
    try:
        return obj[name]
    except (KeyError, TypeError):
        return None


def id_of(value: Any) -> str | None:
    """An object's id whether Stripe sent the id or the expanded object."""
    if isinstance(value, str):
        return value
    nested = field_of(value, "id")
    return nested if isinstance(nested, str) else None
