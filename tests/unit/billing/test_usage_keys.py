"""A paid call's identity (what makes a retry a retry) and the meter-event retry schedule."""

from __future__ import annotations

import time
from datetime import timedelta

from service.billing.usage import new_usage_id
from service.billing.usage_reporter import retry_delay
from service.paywall.admission import RETRY_WINDOW_SECONDS, call_key

NOW = 1_800_000_000.0
BASE = {"session_id": "s1", "request_id": "7", "tool": "sql_explain", "arguments": {"query": "select 1"}}


def test_the_same_request_is_the_same_call_within_the_window() -> None:
    assert call_key(**BASE, now=NOW) == call_key(**BASE, now=NOW + 1)  # type: ignore[arg-type]
    reordered = {**BASE, "arguments": {"b": 1, "a": 2}}
    swapped = {**BASE, "arguments": {"a": 2, "b": 1}}
    assert call_key(**reordered, now=NOW) == call_key(**swapped, now=NOW)  # type: ignore[arg-type]


def test_anything_else_is_another_call() -> None:
    key = call_key(**BASE, now=NOW)  # type: ignore[arg-type]
    for change in (
        {"session_id": "s2"},
        {"session_id": None},
        {"request_id": "8"},
        {"tool": "ascii_chart"},
        {"arguments": {"query": "select 2"}},
    ):
        assert call_key(**{**BASE, **change}, now=NOW) != key, change  # type: ignore[arg-type]
    later = NOW - NOW % RETRY_WINDOW_SECONDS + RETRY_WINDOW_SECONDS
    assert call_key(**BASE, now=later) != key, "the same request id much later is a new call"  # type: ignore[arg-type]


def test_meter_event_retries_back_off_to_an_hour() -> None:
    assert [retry_delay(n) for n in (1, 2, 3)] == [timedelta(seconds=s) for s in (30, 60, 120)]
    assert retry_delay(30) == timedelta(hours=1)


def test_usage_ids_are_unique_and_lead_with_the_time_they_were_made() -> None:
    before = time.time_ns() // 1000
    made = [new_usage_id() for _ in range(1000)]
    after = time.time_ns() // 1000
    assert len(set(made)) == len(made)
    stamps = [int(usage_id[3:16], 16) for usage_id in made]
    assert all(usage_id.startswith("ur_") and len(usage_id) <= 64 for usage_id in made)
    assert before <= stamps[0] and stamps[-1] <= after
    assert stamps == sorted(stamps), "made one after another, they sort in that order"
