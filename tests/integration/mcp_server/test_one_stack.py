"""`/mcp` and Stripe's webhooks go through the same declared middleware as every other route: each
response carries the request id and the security headers, is counted by route and status, and
`/mcp` outside the service's lifespan answers 503."""

from __future__ import annotations

import json
from typing import Any

import httpx
from fastapi import FastAPI

from service.app import create_app
from service.billing.stripe_sync.endpoints import WEBHOOK_PATH
from tests.integration.mcp_server.test_resumable_streams import open_session, sse_events, whoami_call
from tests.support.mcp_http import ACCEPT, INITIALIZE
from tests.support.servers import bound_socket, port_of, serve
from tests.support.service import RunningService, make_settings

MODERN = "2026-07-28"
SECURITY_HEADERS = ("content-security-policy", "x-content-type-options", "x-frame-options", "referrer-policy")


def assert_one_stack(response: httpx.Response, request_id: str) -> None:
    assert response.headers["x-request-id"] == request_id
    for name in SECURITY_HEADERS:
        assert name in response.headers, f"{name} missing on {response.request.method} {response.url.path}"
    assert response.headers["x-content-type-options"] == "nosniff"


def modern_call(name: str) -> tuple[dict[str, Any], dict[str, str]]:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {"Accept": ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}
    return body, headers


async def test_mcp_answers_of_both_eras_carry_the_stack_headers(service: RunningService) -> None:
    async with service.http() as http:
        refused = await http.post(
            "/mcp", json=INITIALIZE, headers={"Accept": ACCEPT, "X-Request-ID": "r-401"}
        )
        assert refused.status_code == 401
        assert 'resource_metadata="' in refused.headers["www-authenticate"]
        assert_one_stack(refused, "r-401")

        session = await open_session(service, http, "ada", primed=False)
        headers = session.headers(**{"X-Request-ID": "r-sse"})
        async with http.stream("POST", "/mcp", json=whoami_call(2), headers=headers) as streamed:
            assert streamed.headers["content-type"].startswith("text/event-stream")
            events = [event async for event in sse_events(streamed)]
        assert json.loads(events[-1].data)["result"]["structuredContent"]["username"] == "ada"
        assert_one_stack(streamed, "r-sse")

        body, modern_headers = modern_call("whoami")
        modern_headers.update({"Authorization": f"Bearer {session.token}", "X-Request-ID": "r-modern"})
        modern = await http.post("/mcp", json=body, headers=modern_headers)
        assert modern.status_code == 200
        assert "ada" in modern.text
        assert_one_stack(modern, "r-modern")

        closed = await http.delete("/mcp", headers=session.headers(**{"X-Request-ID": "r-delete"}))
        assert closed.status_code == 200
        assert_one_stack(closed, "r-delete")
        exposition = (await http.get("/metrics")).text
    assert 'http_requests_total{method="POST",route="/mcp",status="401"} 1.0' in exposition
    assert 'http_requests_total{method="DELETE",route="/mcp",status="200"} 1.0' in exposition


async def test_webhook_answers_carry_the_stack_headers(service: RunningService) -> None:
    async with service.http() as http:
        forged = await http.post(
            WEBHOOK_PATH, content=b"{}", headers={"Stripe-Signature": "t=1,v1=00", "X-Request-ID": "w-1"}
        )
        wrong_method = await http.get(WEBHOOK_PATH, headers={"X-Request-ID": "w-2"})
    assert forged.status_code == 400
    assert forged.json() == {"error": "invalid_request"}
    assert_one_stack(forged, "w-1")
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "POST"
    assert_one_stack(wrong_method, "w-2")


async def post_mcp(app: FastAPI) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.post("/mcp", json={}, headers={"X-Request-ID": "outside"})


async def test_mcp_outside_the_lifespan_is_a_503_through_the_same_stack(database_url: str) -> None:
    sock = bound_socket()
    app = create_app(make_settings(database_url, port_of(sock)))

    before = await post_mcp(app)
    async with serve(app, sock) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        running = await http.post("/mcp", json={}, headers={"X-Request-ID": "inside"})
    after = await post_mcp(app)

    assert running.status_code == 401
    assert_one_stack(running, "inside")
    for answer in (before, after):
        assert answer.status_code == 503
        assert answer.json() == {"error": "service is starting or stopping"}
        assert_one_stack(answer, "outside")
