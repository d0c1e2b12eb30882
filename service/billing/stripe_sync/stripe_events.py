"""A Stripe event as the webhook path reads it: the envelope's fields, and its object as plain JSON.

stripe-python's `Event` builds an object per nested dict of the payload, CPU on every delivery
that nothing here needs (docs/adr/0008-measured-choices.md): the processor reads the few fields it
uses through `field_of`, and never trusts the object's state anyway (it re-reads it from Stripe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import stripe


class MalformedEvent(ValueError):
    """Signed JSON that is not a Stripe event envelope."""


@dataclass(frozen=True, slots=True)
class StripeEventData:
    id: str
    type: str
    created: int
    livemode: bool
    object: dict[str, Any]

    @classmethod
    def from_json(cls, payload: Any) -> StripeEventData:
        if not isinstance(payload, dict):
            raise MalformedEvent("the payload is not a JSON object")
        data = payload.get("data")
        obj = data.get("object") if isinstance(data, dict) else None
        event_id, event_type, created = payload.get("id"), payload.get("type"), payload.get("created")
        if not isinstance(event_id, str) or not event_id:
            raise MalformedEvent("the event has no id")
        if not isinstance(event_type, str) or not event_type:
            raise MalformedEvent("the event has no type")
        if not isinstance(created, int) or isinstance(created, bool):
            raise MalformedEvent("the event has no created time")
        if not isinstance(obj, dict):
            raise MalformedEvent("the event has no data.object")
        return cls(event_id, event_type, created, payload.get("livemode") is True, obj)

    @classmethod
    def from_stripe(cls, event: stripe.Event) -> StripeEventData:
        """An event listed through the API (`stripe events replay`), as the webhook path reads it."""
        return cls.from_json(event.to_dict())
