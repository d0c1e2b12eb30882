"""The SDK defaults the service switches off answer exactly as the SDK's own defaults do.

Each case is sent to two real `MCPServer` apps, one as the SDK builds it and one trimmed, over ASGI.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import httpx
import pytest
from mcp.server import MCPServer
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import Field

from service.mcp_server.sdk_trims import HeaderSchemaLookup, check_only_declared_headers, drop_otel_spans
from tests.support.service import RunningService, run_service

MODERN = "2026-07-28"


def build_server(*, trimmed: bool) -> MCPServer:
    server = MCPServer("trims")

    @server.tool()
    def region_report(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        return f"report for {region}"

    @server.tool()
    def echo(text: str) -> str:
        return text

    if trimmed:
        drop_otel_spans(server)
        check_only_declared_headers(server)
    return server


@asynccontextmanager
async def client_of(server: MCPServer) -> AsyncIterator[httpx.AsyncClient]:
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    async with server.session_manager.run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client


async def call(client: httpx.AsyncClient, name: str, arguments: dict[str, Any], **headers: str) -> int:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    response = await client.post(
        "/mcp",
        content=json.dumps(body),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": name,
            **headers,
        },
    )
    return response.status_code


CASES = [
    pytest.param("region_report", {"region": "eu"}, {"Mcp-Param-Region": "eu"}, 200, id="declared-match"),
    pytest.param("region_report", {"region": "eu"}, {"Mcp-Param-Region": "us"}, 400, id="declared-mismatch"),
    pytest.param("region_report", {"region": "eu"}, {}, 400, id="declared-missing"),
    pytest.param("echo", {"text": "hi"}, {}, 200, id="undeclared"),
    pytest.param("echo", {"text": "hi"}, {"Mcp-Param-Region": "us"}, 200, id="undeclared-stray-header"),
]


@pytest.mark.parametrize(("name", "arguments", "headers", "status"), CASES)
async def test_header_checks_answer_as_the_sdk_does(
    name: str, arguments: dict[str, Any], headers: dict[str, str], status: int
) -> None:
    answers = []
    for trimmed in (False, True):
        async with client_of(build_server(trimmed=trimmed)) as client:
            answers.append(await call(client, name, arguments, **headers))
    assert answers == [status, status]


def test_only_a_schema_that_declares_valid_headers_is_handed_to_the_check() -> None:
    declared = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}
    plain = {"type": "object", "properties": {"text": {"type": "string"}}}
    invalid = {"type": "object", "properties": {"tags": {"type": "array", "x-mcp-header": "Tags"}}}
    schemas: dict[str, dict[str, Any]] = {"declared": declared, "plain": plain, "invalid": invalid}
    lookup = HeaderSchemaLookup(schemas.get)

    assert lookup("declared") is declared
    assert lookup("plain") is None
    assert lookup("invalid") is None  # the SDK compares nothing for a schema it rejects
    assert lookup("missing") is None

    schemas["plain"] = declared  # a tool replaced under the same name is looked at again
    assert lookup("plain") is declared


def test_otel_spans_are_dropped_and_the_rest_of_the_chain_kept() -> None:
    server = build_server(trimmed=False)
    before = list(server.middleware)
    drop_otel_spans(server)

    assert any(isinstance(item, OpenTelemetryMiddleware) for item in before)
    assert server.middleware == [item for item in before if not isinstance(item, OpenTelemetryMiddleware)]


async def test_the_service_drops_otel_spans_unless_asked(service: RunningService, database_url: str) -> None:
    def has_spans(server: MCPServer) -> bool:
        return any(isinstance(item, OpenTelemetryMiddleware) for item in server.middleware)

    assert not has_spans(service.runtime.mcp)
    async with run_service(database_url, mcp_otel_spans=True) as with_spans:
        assert has_spans(with_spans.runtime.mcp)
