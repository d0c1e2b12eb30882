"""Optional OpenTelemetry tracing: a span per HTTP request, exported over OTLP/HTTP.

On when OTEL_EXPORTER_OTLP_ENDPOINT names a collector and the `otel` extra is installed
(`pip install paid-mcp-service[otel]`). The exporter reads its other settings (headers, timeout,
compression) and the sampler its own (OTEL_TRACES_SAMPLER) from the standard OTEL_* variables.
The serve entrypoint builds the provider; the app only receives a tracer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from opentelemetry.trace import Span, StatusCode

from service import DISTRIBUTION, __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from service.settings import ObservabilitySettings

logger = logging.getLogger(__name__)

TRACER_NAME = DISTRIBUTION

TRACES_PATH = "/v1/traces"  # what OTLP/HTTP appends to the base endpoint for spans
# Kept short: the flush at exit runs inside the pod's termination grace period.
FLUSH_TIMEOUT_MILLIS = 2000


def tracer_provider(observability: ObservabilitySettings, service_name: str) -> TracerProvider | None:
    """An SDK provider exporting to the configured collector; None when tracing is off."""
    endpoint = observability.otel_exporter_otlp_endpoint
    if not endpoint:
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not installed: tracing is off"
        )
        return None
    resource = Resource.create({"service.name": service_name, "service.version": __version__})
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + TRACES_PATH)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    collector = urlsplit(endpoint)
    logger.info("tracing to %s://%s", collector.scheme, collector.hostname)  # no credentials in the log
    return provider


def flush_spans(provider: TracerProvider) -> Callable[[], None]:
    """What `serve` runs at exit: export the spans still queued, for a bounded time."""

    def flush() -> None:
        if not provider.force_flush(FLUSH_TIMEOUT_MILLIS):
            logger.warning("spans still queued at exit were not exported within %d ms", FLUSH_TIMEOUT_MILLIS)

    return flush


def describe_request(span: Span, method: str, route: str, status: int) -> None:
    """Name and label a request's server span once its route and status are known."""
    span.update_name(f"{method} {route}")
    span.set_attribute("http.request.method", method)
    span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(StatusCode.ERROR)
