"""A paid call's identity (what makes a retry a retry) and the meter-event retry schedule."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from service.billing.usage import new_usage_id
from service.billing.usage_reporter import retry_delay
from service.paywall.admission import IDEMPOTENCY_KEY_META, InvalidIdempotencyKey, call_key, idempotency_key

BASE = {"session_id": "s1", "request_id": "7", "tool": "sql_explain", "arguments": {"query": "select 1"}}


def test_a_session_request_is_one_call_however_late_its_retry() -> None:
    """The protocol forbids reusing a request id within a session: the pair names one call, with no
    time in the key (a key with a time window charged a retry that crossed the window's edge)."""
    key = call_key(**BASE)  # type: ignore[arg-type]
    assert call_key(**BASE) == key  # type: ignore[arg-type]
    reordered = {**BASE, "arguments": {"b": 1, "a": 2}}
    swapped = {**BASE, "arguments": {"a": 2, "b": 1}}
    assert call_key(**reordered) == call_key(**swapped)  # type: ignore[arg-type]
    for change in (
        {"session_id": "s2"},
        {"request_id": "8"},
        {"tool": "ascii_chart"},
        {"arguments": {"query": "select 2"}},
    ):
        assert call_key(**{**BASE, **change}) != key, change  # type: ignore[arg-type]


def test_an_idempotency_key_names_the_call_on_any_connection() -> None:
    named = {**BASE, "idempotency_key": "order-17"}
    key = call_key(**named)  # type: ignore[arg-type]
    assert call_key(**{**named, "session_id": None, "request_id": "1"}) == key  # type: ignore[arg-type]
    assert call_key(**{**named, "idempotency_key": "order-18"}) != key  # type: ignore[arg-type]
    assert call_key(**{**named, "arguments": {"query": "select 2"}}) != key  # type: ignore[arg-type]


def test_without_a_session_or_a_key_each_request_is_a_call_of_its_own() -> None:
    """2026-07-28 clients start request ids afresh on each connection: equal ids are not one call."""
    sessionless = {**BASE, "session_id": None}
    assert call_key(**sessionless) != call_key(**sessionless)  # type: ignore[arg-type]


def test_idempotency_keys_are_bounded_printable_ascii() -> None:
    assert idempotency_key(None) is None
    assert idempotency_key({}) is None
    assert idempotency_key({IDEMPOTENCY_KEY_META: "k" * 255}) == "k" * 255
    for bad in ("", "k" * 256, "tab\there", "caf\u00e9", 17, ["k"]):
        with pytest.raises(InvalidIdempotencyKey):
            idempotency_key({IDEMPOTENCY_KEY_META: bad})


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
