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
NOT_EXPORTED_YET = {
    "stripe_webhook_event_age_seconds_bucket": (
        "histogram stripe_webhook_event_age_seconds, no labels: receipt time minus the event's `created`"
    ),
    "stripe_webhook_last_received_timestamp_seconds": (
        "gauge, no labels: Unix time of the last signed event received"
    ),
    "stripe_reconcile_repairs_total": "counter stripe_reconcile_repairs, no labels: objects a run repaired",
    "stripe_reconcile_last_success_timestamp_seconds": (
        "gauge, no labels: Unix time a reconciliation run last completed"
    ),
    "http_requests_total": "counter http_requests{method, route, status}; route: the matched route template",
    "db_pool_checked_out_connections": "gauge, no labels: connections of the SQLAlchemy pool in use",
    "db_pool_max_connections": "gauge, no labels: pool_size + max_overflow",
    "paywall_completion_bus_connected": (
        "gauge, no labels: 1 while the LISTEN connection is up, 0 while not; absent with COMPLETION_BUS=local"
    ),
}


def exported_names() -> set[str]:
    names = set(SCRAPE)
    for family in ServiceMetrics().registry.collect():
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
