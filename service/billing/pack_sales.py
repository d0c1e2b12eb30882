"""What a credit pack's Checkout Session records of the pack it sells.

We set this metadata when we create the session (a customer cannot change a session's metadata),
so the grant pays out what was sold and checks Stripe's amount against the price the customer
was shown, whatever the catalog says by the time a delayed payment confirms.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from service.billing.plans import CreditPack
from service.billing.stripe_fields import field_of

PACK_ID_KEY = "credit_pack_id"
_CREDITS_KEY = "credit_pack_credits"
_AMOUNT_KEY = "credit_pack_amount"
_CURRENCY_KEY = "credit_pack_currency"
_COUNT = re.compile(r"[1-9][0-9]{0,15}")


class UnreadableSale(ValueError):
    """The session's recorded pack is incomplete or malformed."""


def sale_metadata(pack: CreditPack) -> dict[str, str]:
    """The metadata a credit pack's Checkout Session carries: the pack as sold at this moment."""
    return {
        PACK_ID_KEY: pack.id,
        _CREDITS_KEY: str(pack.credits),
        _AMOUNT_KEY: str(pack.amount),
        _CURRENCY_KEY: pack.currency,
    }


def recorded_sale(metadata: Any, current: CreditPack | None) -> CreditPack | None:
    """The pack as the session recorded it, or None for a session made before sessions recorded
    one. `current` is the catalog's pack of the same id, if any, which lends its name only.

    Raises `UnreadableSale` when the recorded values are partial or not a valid pack.
    """
    pack_id = field_of(metadata, PACK_ID_KEY)
    values = [field_of(metadata, key) for key in (_CREDITS_KEY, _AMOUNT_KEY, _CURRENCY_KEY)]
    if all(value is None for value in values):
        return None
    credits, amount, currency = values
    if not (
        isinstance(pack_id, str)
        and isinstance(credits, str)
        and isinstance(amount, str)
        and isinstance(currency, str)
        and _COUNT.fullmatch(credits)
        and _COUNT.fullmatch(amount)
    ):
        raise UnreadableSale(f"credit pack {pack_id!r}: recorded credits, amount or currency unreadable")
    try:
        return CreditPack(
            id=pack_id,
            name=current.name if current is not None else pack_id,
            lookup_key=current.lookup_key if current is not None else pack_id,
            credits=int(credits),
            amount=int(amount),
            currency=currency,
        )
    except ValidationError as exc:
        raise UnreadableSale(f"credit pack {pack_id!r}: recorded values are not a valid pack") from exc
