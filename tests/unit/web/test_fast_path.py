"""ServiceApp: `/mcp` goes straight to its app; every other path still goes through FastAPI."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from service.web.fast_path import ServiceApp


async def test_only_the_fast_path_skips_fastapi() -> None:
    async def mcp(scope: Scope, receive: Receive, send: Send) -> None:
        await PlainTextResponse("from the MCP app")(scope, receive, send)

    app = ServiceApp(fast_paths={"/mcp": mcp})

    @app.get("/other")
    async def other() -> dict[str, bool]:
        return {"ok": True}

    @app.middleware("http")
    async def mark(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        response.headers["x-through-fastapi"] = "yes"
        return response

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        fast = await client.post("/mcp", content=b"{}")
        routed = await client.get("/other")
        nearby = await client.get("/mcp/more")
    assert (fast.text, fast.headers.get("x-through-fastapi")) == ("from the MCP app", None)
    assert (routed.json(), routed.headers.get("x-through-fastapi")) == ({"ok": True}, "yes")
    assert (nearby.status_code, nearby.headers.get("x-through-fastapi")) == (404, "yes")


def test_fastapi_telemetry_is_off_unless_asked_for() -> None:
    config = ServiceApp()._telemetry
    assert (config["tracing"], config["metrics"], config["logs"]) == (False, False, False)
    assert ServiceApp(telemetry={"tracing": True})._telemetry["tracing"] is True
