"""Audit sampling: the first event of a reason is recorded, then one per interval with its count."""

from __future__ import annotations

from service.audit.sampling import AuditSampler


def test_one_row_per_reason_per_interval_carrying_the_events_it_stands_for() -> None:
    now = [100.0]
    sampler = AuditSampler(60.0, clock=lambda: now[0])

    assert sampler.take("bad_signature") == 1
    assert [sampler.take("bad_signature") for _ in range(9)] == [None] * 9
    assert sampler.take("not_json") == 1, "each reason has its own interval"
    now[0] += 60.0
    assert sampler.take("bad_signature") == 10, "the nine unrecorded ones and this one"
    assert sampler.take("bad_signature") is None


def test_keys_are_bounded_forgetting_the_one_seen_longest_ago() -> None:
    now = [100.0]
    sampler = AuditSampler(60.0, max_keys=2, clock=lambda: now[0])

    assert sampler.take(("bob", "el_a", "identity_mismatch")) == 1
    assert sampler.take(("bob", "el_b", "identity_mismatch")) == 1
    assert sampler.take(("bob", "el_a", "identity_mismatch")) is None  # seen again: kept longest
    assert sampler.take(("bob", "el_c", "identity_mismatch")) == 1  # forgets el_b
    assert sampler.take(("bob", "el_a", "identity_mismatch")) is None
    assert sampler.take(("bob", "el_b", "identity_mismatch")) == 1, "forgotten, so it starts afresh"
