"""docs/stripe.md tells operators which events to send; it must name exactly what the code handles."""

from __future__ import annotations

import re
from pathlib import Path

from service.billing.stripe_sync.processor import HANDLED_EVENT_TYPES

DOC = Path(__file__).resolve().parents[3] / "docs" / "stripe.md"


def test_the_documented_event_types_are_the_handled_ones() -> None:
    text = DOC.read_text()
    section = text[text.index("<!-- handled-event-types") : text.index("<!-- end handled-event-types")]
    documented = set(re.findall(r"^- `([a-z_.]+)`", section, re.MULTILINE))
    assert documented == set(HANDLED_EVENT_TYPES)
