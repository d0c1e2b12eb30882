"""Narrowing stripe-python's typed objects where a test knows more than their types say.

stripe-python types most fields as optional, and an expandable field as the id or the object; a
test that asked for the expansion, or reads a field the response carries, says so here and fails
on the spot if it does not hold.
"""

from __future__ import annotations

from typing import Any, TypeVar

import stripe

T = TypeVar("T")


def present(value: T | None) -> T:
    """A field typed as optional that this response carries."""
    assert value is not None
    return value


def expanded(value: str | T | None) -> T:
    """An expandable field the request expanded: the object, not its id."""
    assert value is not None and not isinstance(value, str), f"not expanded: {value!r}"
    return value


def unexpanded(value: str | object | None) -> str:
    """An expandable field the request left as it is: the id."""
    assert isinstance(value, str), f"not an id: {value!r}"
    return value


def error_json(error: stripe.StripeError) -> dict[str, Any]:
    """The `error` object of the JSON body Stripe answered with."""
    body = error.json_body
    assert isinstance(body, dict), body
    found: dict[str, Any] = body["error"]
    return found
