"""The loop-written families expose exactly what prometheus_client's own Counter and Histogram would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.observability.loop_metrics import LoopCounter, LoopHistogram, LoopMetricsCollector

BUCKETS = (0.0001, 0.005, 0.25, 1, 600)
# On a bound (counted in that bucket), between bounds, above the last bound (+Inf only), zero.
OBSERVATIONS = (0.0001, 0.003, 0.25, 0.7, 1.0, 601.5, 0.0, 2.0)


def samples(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def without_created_values(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float],
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Creation times differ between two objects made a moment apart; their presence must not."""
    return {key: (0.0 if key[0].endswith("_created") else value) for key, value in found.items()}


def test_same_series_as_prometheus_client() -> None:
    reference = CollectorRegistry()
    counter = Counter("calls", "Calls by tool and outcome.", ["tool", "outcome"], registry=reference)
    histogram = Histogram("call_seconds", "Call time.", ["tool"], registry=reference, buckets=BUCKETS)

    ours = CollectorRegistry()
    loop_counter = LoopCounter("calls", "Calls by tool and outcome.", ["tool", "outcome"])
    loop_histogram = LoopHistogram("call_seconds", "Call time.", ["tool"], buckets=BUCKETS)
    ours.register(LoopMetricsCollector([loop_counter, loop_histogram]))

    counter.labels(tool="chart", outcome="error")  # declared, never incremented: exported at zero
    loop_counter.child("chart", "error")
    for index, value in enumerate(OBSERVATIONS):
        tool = "chart" if index % 3 else "stats"
        counter.labels(tool=tool, outcome="ok").inc()
        histogram.labels(tool=tool).observe(value)
        loop_counter.child(tool, "ok").inc()
        loop_histogram.child(tool).observe(value)

    expected = samples(reference)
    found = samples(ours)
    assert without_created_values(found) == without_created_values(expected)
    assert found[("call_seconds_bucket", frozenset({("tool", "chart"), ("le", "+Inf")}))] == 5
    assert found[("call_seconds_bucket", frozenset({("tool", "chart"), ("le", "1.0")}))] == 3
    assert found[("calls_created", frozenset({("tool", "chart"), ("outcome", "error")}))] > 0


def test_empty_collector_exports_nothing() -> None:
    registry = CollectorRegistry()
    registry.register(
        LoopMetricsCollector([LoopHistogram("idle_seconds", "Never observed.", ["source"], buckets=BUCKETS)])
    )
    assert not [key for key in samples(registry) if key[0].startswith("idle_seconds")]
