"""Every metric the alerts and the dashboard select is one the service exports, or is listed below.

Usage (project venv, from the repository root): PYTHONPATH=. python k8s/metric_names.py NAMES.txt
NAMES.txt holds the metric names the PromQL expressions select, one a line (written by
k8s/schemas/validate-crds.mjs). Exits 1 on a name that is neither exported by `ServiceMetrics` nor
listed in NOT_EXPORTED_YET, and on a listed name the service exports by now (drop it from the list).
"""

from __future__ import annotations

import sys
from pathlib import Path

from service.observability.metrics import ServiceMetrics

# Names Prometheus adds to every scrape.
SCRAPE = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
}
# Alerts and panels written ahead of the service: name -> type, labels and meaning.
NOT_EXPORTED_YET: dict[str, str] = {}


def exported_names() -> set[str]:
    names = set(SCRAPE)
    metrics = ServiceMetrics()
    metrics.watch_completion_bus(lambda: True)  # exported only where the bus is PostgreSQL's
    metrics.watch_usage_decisions(lambda: 0, lambda: 0)  # exported only on PostgreSQL
    for family in metrics.registry.collect():
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


def main(path: str) -> int:
    used = {line.strip() for line in Path(path).read_text().splitlines() if line.strip()}
    exported = exported_names()
    unknown = sorted(used - exported - set(NOT_EXPORTED_YET))
    exported_now = sorted(set(NOT_EXPORTED_YET) & exported)
    for name in sorted(used & exported):
        print(f"{name}: exported")
    for name in sorted(used & set(NOT_EXPORTED_YET)):
        print(f"{name}: not exported yet ({NOT_EXPORTED_YET[name]})")
    for name in unknown:
        print(f"{name}: UNKNOWN: neither exported by the service nor listed in k8s/metric_names.py")
    for name in exported_now:
        print(f"{name}: exported now: drop it from NOT_EXPORTED_YET in k8s/metric_names.py")
    return 1 if unknown or exported_now else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
