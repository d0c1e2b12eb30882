"""Metrics (Prometheus), structured logs and the per-request context both of them read."""
