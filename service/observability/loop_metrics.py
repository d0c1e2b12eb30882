"""Counters and histograms for the tool-call hot path: plain arithmetic now, Prometheus families when scraped.

prometheus_client's `Counter` and `Histogram` are safe from any thread because every increment
takes a lock: a tool call's counter and two histogram observations are five lock round trips,
which with their method layers are a large part of our per-call code's instructions
(docs/adr/0008-measured-choices.md). These series are written only by the event loop's thread
(the tool-call observer and the entitlement cache) and read by `/metrics`, which is served on the
same loop, so they keep plain numbers and become the same families, with the same names, labels
and `_created` series, only when collected.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

INF = float("inf")


class LoopCounter:
    """A labelled counter; `child(values)` returns the slot `inc` adds to."""

    def __init__(self, name: str, documentation: str, label_names: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = tuple(label_names)
        self._slots: dict[tuple[str, ...], CounterSlot] = {}

    def child(self, *values: str) -> CounterSlot:
        slot = self._slots.get(values)
        if slot is None:
            slot = self._slots[values] = CounterSlot()
        return slot

    def family(self) -> CounterMetricFamily:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.label_names)
        for values, slot in self._slots.items():
            family.add_metric(values, slot.value, created=slot.created)
        return family


class CounterSlot:
    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self) -> None:
        self.value += 1


class LoopHistogram:
    """A labelled histogram; `child(values)` returns the slot `observe` records into."""

    def __init__(
        self, name: str, documentation: str, label_names: Sequence[str], buckets: Iterable[float]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = tuple(label_names)
        self.upper_bounds = tuple(sorted(float(bound) for bound in buckets))
        self._slots: dict[tuple[str, ...], HistogramSlot] = {}

    def child(self, *values: str) -> HistogramSlot:
        slot = self._slots.get(values)
        if slot is None:
            slot = self._slots[values] = HistogramSlot(self.upper_bounds)
        return slot

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.label_names)
        for values, slot in self._slots.items():
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip((*self.upper_bounds, INF), slot.counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == INF else repr(bound), cumulative))
            family.add_metric(values, buckets, slot.total)
            family.add_sample(
                f"{self.name}_created", dict(zip(self.label_names, values, strict=True)), slot.created
            )
        return family


class HistogramSlot:
    __slots__ = ("counts", "created", "total", "upper_bounds")

    def __init__(self, upper_bounds: tuple[float, ...]) -> None:
        self.upper_bounds = upper_bounds
        self.counts = [0] * (len(upper_bounds) + 1)  # the last one is +Inf
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        # Prometheus buckets are "less than or equal": bisect_left finds the first bound >= value.
        self.counts[bisect.bisect_left(self.upper_bounds, value)] += 1
        self.total += value


class LoopMetricsCollector(Collector):
    """Registers the loop-written families with a `CollectorRegistry`."""

    def __init__(self, metrics: Sequence[LoopCounter | LoopHistogram]) -> None:
        self._metrics = tuple(metrics)

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        for metric in self._metrics:
            yield metric.family()
