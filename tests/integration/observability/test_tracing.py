"""OpenTelemetry tracing (the `otel` extra): each request a span sent to an OTLP/HTTP collector, and
its trace id on the request's log lines."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.app import create_app
from service.observability.tracing import TRACER_NAME, tracer_provider
from tests.integration.observability.observed import captured_logs, json_lines
from tests.support.databases import DatabaseTemplates
from tests.support.replicas import Replica
from tests.support.servers import ReservedPort, bound_socket, port_of, serve
from tests.support.service import RunningService, make_settings

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


class Collector:
    """An OTLP/HTTP trace receiver: keeps every span it is sent, once. The exporter sends a batch
    again when an answer is slow to come (at-least-once), so a span seen before is not kept twice."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._seen: set[tuple[bytes, bytes]] = set()
        self.app = Starlette(routes=[Route("/v1/traces", self.receive, methods=["POST"])])

    async def receive(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    if (span.trace_id, span.span_id) not in self._seen:
                        self._seen.add((span.trace_id, span.span_id))
                        self.spans.append(span)
        return Response(ExportTraceServiceRequest().SerializeToString(), media_type="application/x-protobuf")

    def named(self, name: str) -> list[Span]:
        return [span for span in self.spans if span.name == name]


def attributes(span: Span) -> dict[str, object]:
    values: dict[str, object] = {}
    for item in span.attributes:
        kind = item.value.WhichOneof("value")
        values[item.key] = getattr(item.value, kind) if kind else None
    return values


def test_no_endpoint_no_tracing_and_only_http_endpoints() -> None:
    assert (
        tracer_provider(make_settings("sqlite:///unused.db", 8000).observability, "paid-mcp-service") is None
    )
    for endpoint in ("file:///etc/passwd", "collector:4318", "http://a b"):
        with pytest.raises(ValidationError):
            make_settings("sqlite:///unused.db", 8000, otel_exporter_otlp_endpoint=endpoint)


async def test_requests_are_exported_as_spans_and_logged_with_their_trace_id(database_url: str) -> None:
    collector = Collector()
    async with serve(collector.app, bound_socket(), lifespan="off") as collector_url:
        sock = bound_socket()
        settings = make_settings(database_url, port_of(sock), otel_exporter_otlp_endpoint=collector_url)
        provider = tracer_provider(settings.observability, settings.mcp.server_name)
        assert provider is not None
        app = create_app(settings, tracer=provider.get_tracer(TRACER_NAME))
        try:
            with captured_logs(logging.DEBUG) as stream:
                async with serve(app, sock) as base_url:
                    service = RunningService(base_url=base_url, settings=settings, app=app)
                    async with service.http() as http:
                        probe = await http.get(
                            "/readyz", headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
                        )
                        assert probe.status_code == 200
                    await service.add_user("tia")
                    token = (await service.personal_token("tia")).secret
                    async with service.mcp_client(token) as client:
                        assert not (await client.call_tool("whoami", {})).is_error
            # The exporter posts from its own thread, to the collector served on this loop.
            assert await asyncio.to_thread(provider.force_flush)
        finally:
            provider.shutdown()

    [readyz] = collector.named("GET /readyz")
    assert readyz.trace_id.hex() == CALLER_TRACE, "the caller's trace is continued"
    assert readyz.parent_span_id.hex() == CALLER_SPAN
    assert readyz.kind == Span.SpanKind.SPAN_KIND_SERVER
    assert attributes(readyz) == {
        "http.request.method": "GET",
        "http.route": "/readyz",
        "http.response.status_code": 200,
    }
    mcp_spans = {span.span_id.hex(): span for span in collector.named("POST /mcp")}
    assert mcp_spans, [span.name for span in collector.spans]

    lines = json_lines(stream)
    [probe_line] = [line for line in lines if line.get("http_path") == "/readyz"]
    assert probe_line["trace_id"] == CALLER_TRACE
    assert probe_line["span_id"] == readyz.span_id.hex()
    [call_line] = [line for line in lines if line.get("tool") == "whoami"]
    call_span = mcp_spans[call_line["span_id"]]
    assert call_line["trace_id"] == call_span.trace_id.hex()


async def test_serve_traces_when_the_endpoint_is_set(db_templates: DatabaseTemplates, tmp_path: Path) -> None:
    """`python -m service serve` with OTEL_EXPORTER_OTLP_ENDPOINT: spans reach the collector by exit."""
    collector = Collector()
    with ReservedPort() as reserved:
        async with serve(collector.app, bound_socket(), lifespan="off") as collector_url:
            replica = Replica(
                "traced",
                reserved,
                {
                    "DATABASE_URL": db_templates.fresh_url(tmp_path),
                    "PUBLIC_BASE_URL": f"http://127.0.0.1:{reserved.port}",
                    "STRIPE_SANDBOX_PORT": "0",
                    "STRIPE_SANDBOX_STATE_FILE": str(tmp_path / "stripe.json"),
                    "OTEL_EXPORTER_OTLP_ENDPOINT": collector_url,
                    "LOG_FORMAT": "json",
                    "LOG_LEVEL": "DEBUG",  # probes' access lines are DEBUG
                },
                stripe_client=None,  # type: ignore[arg-type]
                log_path=tmp_path / "replica.log",
            )
            await replica.start()  # polls /readyz until it answers 200
            await replica.terminate()  # uvicorn ends by re-raising the signal: -15
    [ready, *_] = [
        span
        for span in collector.named("GET /readyz")
        if attributes(span)["http.response.status_code"] == 200
    ]
    lines = [json.loads(line) for line in replica.log().splitlines() if line.startswith("{")]
    traced = [line for line in lines if line.get("http_path") == "/readyz" and line.get("http_status") == 200]
    assert {line["trace_id"] for line in traced} >= {ready.trace_id.hex()}
