"""The in-memory store, and its optional JSON file for `make run`.

All API objects are kept as the JSON-ready dicts the API returns, so persistence is a plain dump and
responses are deep copies of stored objects (callers can never mutate the store through a
response). Data Stripe keeps but never shows (card numbers of test cards, portal secrets, a
session's line items) lives in `private`, keyed by the object id.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

KINDS = (
    "product",
    "price",
    "customer",
    "checkout.session",
    "subscription",
    "invoice",
    "invoice_payment",
    "charge",
    "payment_intent",
    "payment_method",
    "refund",
    "dispute",
    "event",
    "webhook_endpoint",
    "billing_portal.session",
    "test_helpers.test_clock",
    "balance_transaction",
    "billing.meter",
)

_FORMAT = 1


class Store:
    """Objects by kind and id, in creation order (lists return them newest first)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Obj]] = {kind: {} for kind in KINDS}
        self.private: dict[str, dict[str, Any]] = {}
        self.clock_offset = 0
        # Meter events have no id and are never listed, only aggregated: per meter id, compact
        # rows [timestamp, value, customer id, created] in arrival order (see `meters`).
        self.meter_events: dict[str, list[list[Any]]] = {}
        # Meter event identifier -> when it was first accepted, for Stripe's 24-hour uniqueness.
        self.meter_identifiers: dict[str, int] = {}

    def put(self, obj: Obj) -> Obj:
        self.objects[obj["object"]][obj["id"]] = obj
        return obj

    def get(self, kind: str, object_id: str) -> Obj | None:
        return self.objects[kind].get(object_id)

    def find(self, object_id: str) -> Obj | None:
        """Any object by id, for expansion, where the field name does not say the kind."""
        for objects in self.objects.values():
            found = objects.get(object_id)
            if found is not None:
                return found
        return None

    def newest_first(self, kind: str) -> list[Obj]:
        return list(reversed(self.objects[kind].values()))

    def remove(self, kind: str, object_id: str) -> None:
        self.objects[kind].pop(object_id, None)

    def priv(self, object_id: str) -> dict[str, Any]:
        return self.private.setdefault(object_id, {})

    # Persistence -----------------------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": _FORMAT,
                "clock_offset": self.clock_offset,
                "objects": self.objects,
                "private": self.private,
                "meter_events": self.meter_events,
                "meter_identifiers": self.meter_identifiers,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Store:
        data = json.loads(text)
        if data.get("format") != _FORMAT:
            raise ValueError(f"unsupported sandbox state format: {data.get('format')!r}")
        store = cls()
        store.clock_offset = int(data["clock_offset"])
        for kind, objects in data["objects"].items():
            if kind in store.objects:
                store.objects[kind].update(objects)
        store.private.update(data["private"])
        store.meter_events.update(data.get("meter_events", {}))
        store.meter_identifiers.update(data.get("meter_identifiers", {}))
        return store

    def save(self, path: Path) -> None:
        """Atomic replace, so a crash mid-write never leaves a truncated state file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> Store:
        return cls.from_json(path.read_text(encoding="utf-8"))
