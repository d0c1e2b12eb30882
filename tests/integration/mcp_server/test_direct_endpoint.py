"""`/mcp` takes the fast path to the SDK's endpoint only while the service runs; before start-up and
after shutdown it goes the long way, to a 503 that says so."""

from __future__ import annotations

import httpx

from service.app import create_app
from service.web.fast_path import ServiceApp
from tests.support.servers import bound_socket, port_of, serve
from tests.support.service import make_settings


async def post_mcp(app: ServiceApp) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.post("/mcp", json={}, headers={"X-Request-ID": "outside"})


async def test_the_fast_path_exists_only_while_the_service_runs(database_url: str) -> None:
    sock = bound_socket()
    app = create_app(make_settings(database_url, port_of(sock)))

    before = await post_mcp(app)
    async with serve(app, sock) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        assert "/mcp" in app.fast_paths
        running = await http.post("/mcp", json={}, headers={"X-Request-ID": "inside"})
    after = await post_mcp(app)

    assert running.status_code == 401, "the SDK's endpoint, behind our bearer check"
    assert 'resource_metadata="' in running.headers["www-authenticate"]
    assert running.headers["x-request-id"] == "inside"
    assert "/mcp" not in app.fast_paths
    for answer in (before, after):
        assert answer.status_code == 503
        assert answer.json() == {"error": "service is starting or stopping"}
        assert answer.headers["x-request-id"] == "outside"
