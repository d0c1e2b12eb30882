"""A vendor's existing MCP server, real and on loopback, for the gateway tests.

It is a plain SDK `MCPServer` served by uvicorn, plus an ASGI recorder that keeps every request's
headers and body, so tests can prove what reached the upstream (its own credential, the signed
user header) and what never did (our users' bearer tokens). `UpstreamHost.running()` can be
entered again on the same port to model a restart.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

import anyio
from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import INVALID_PARAMS, Annotations, CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.gateway.signing import USER_HEADER, verify_user_header
from tests.support.servers import ReservedPort, serve

UPSTREAM_CREDENTIAL = "Bearer upstream-own-credential-123"
USER_HEADER_SECRET = "shared-secret-between-gateway-and-vendor"


class Report(BaseModel):
    words: int
    shout: str


@dataclass
class SeenRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    requests: list[SeenRequest] = field(default_factory=list)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            seen = SeenRequest(
                scope["method"],
                scope["path"],
                {key.decode().lower(): value.decode() for key, value in scope["headers"]},
                b"",
            )
            self.requests.append(seen)

            async def receive_and_keep() -> Message:
                message = await receive()
                if message["type"] == "http.request":
                    seen.body += message.get("body", b"")
                return message

            await app(scope, receive_and_keep, send)

        return recorded

    def tool_calls(self) -> list[SeenRequest]:
        return [seen for seen in self.requests if b'"tools/call"' in seen.body]

    def verified_users(self) -> list[str]:
        """The user each recorded tool call's signed header names, checked against that very call."""
        users: list[str] = []
        for seen in self.tool_calls():
            params = json.loads(seen.body)["params"]
            users.append(
                verify_user_header(
                    USER_HEADER_SECRET,
                    seen.headers[USER_HEADER.lower()],
                    tool_name=params["name"],
                    arguments=params.get("arguments"),
                )
            )
        return users


@dataclass
class Hanging:
    """How many calls of the upstream's `hang` tool have started waiting."""

    started: int = 0
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def start(self) -> None:
        self.started += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def reached(self, calls: int) -> None:
        """Returns once `calls` calls have started."""
        while self.started < calls:
            await self._changed.wait()


def build_upstream(release: anyio.Event, hanging: Hanging | None = None) -> MCPServer:
    server = MCPServer("vendor-upstream")

    @server.tool(
        title="Echo",
        description="Echo the text back.",
        annotations=ToolAnnotations(read_only_hint=True, title="Echo annotation"),
    )
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="A premium report (sold by the gateway's plans).")
    def premium_report(text: str) -> Report:
        return Report(words=len(text.split()), shout=text.upper())

    @server.tool(description="Counts to n, reporting progress at each step.")
    async def count_slowly(n: int, ctx: Context) -> str:
        for step in range(1, n + 1):
            await ctx.report_progress(step, n, f"step {step}")
        return f"counted to {n}"

    @server.tool(description="Always fails as a tool.")
    def explode() -> str:
        raise ToolError("kaboom")

    @server.tool(description="Always refuses with a JSON-RPC error.")
    def refuse() -> str:
        raise MCPError(code=INVALID_PARAMS, message="refused by the vendor")

    @server.tool(description="Waits until the test releases it.")
    async def hang() -> str:
        if hanging is not None:
            hanging.start()
        await release.wait()
        return "released"

    @server.tool(description="A short text whose result carries `n` more bytes in `where`.")
    def padded(where: Literal["result_meta", "item_meta", "item_annotations"], n: int) -> CallToolResult:
        blob = "m" * n
        if where == "result_meta":
            return CallToolResult(content=[TextContent(text="small")], _meta={"blob": blob})
        if where == "item_meta":
            return CallToolResult(content=[TextContent(text="small", _meta={"blob": blob})])
        annotated = TextContent(text="small", annotations=Annotations(last_modified=blob))
        return CallToolResult(content=[annotated])

    @server.tool(description="`n` bytes of text, after one progress notification.")
    async def big_text(n: int, ctx: Context) -> str:
        # The notification makes a 2026-07-28 upstream answer with an SSE stream, unless it answers JSON.
        await ctx.report_progress(0, 1, "writing")
        return "x" * n

    @server.tool(description="Reports progress with a long message until the test releases it.")
    async def chatter(ctx: Context) -> str:
        step = 0
        while not release.is_set():
            step += 1
            await ctx.report_progress(step, None, "junk " * 200)
        return f"chattered {step} times"

    @server.tool(description="A tool no one classified: the gateway must not serve it.")
    def unclassified_admin() -> str:
        return "the vendor's admin tool ran"

    @server.tool(description="Which user the gateway's signed header names.")
    def signed_user(ctx: Context) -> str:
        value = (ctx.headers or {}).get("x-paid-mcp-user")
        if value is None:
            return "no header"
        return verify_user_header(USER_HEADER_SECRET, value, tool_name="signed_user", arguments={})

    return server


@dataclass
class UpstreamHost:
    reserved: ReservedPort
    recorder: Recorder = field(default_factory=Recorder)
    release: anyio.Event = field(default_factory=anyio.Event)
    hanging: Hanging = field(default_factory=Hanging)
    extra_tool: str | None = None
    json_response: bool = False  # answer each request with one JSON body instead of an SSE stream
    first_list_delay_seconds: float = 0.0  # how long the first `tools/list` waits to be handled

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.reserved.port}/mcp"

    @asynccontextmanager
    async def running(self) -> AsyncIterator[MCPServer]:
        """Serve a fresh upstream on `port` (a server's session manager runs only once)."""
        server = build_upstream(self.release, self.hanging)
        if self.extra_tool is not None:
            server.add_tool(lambda: "clash", name=self.extra_tool, description="Clashes with a local tool.")
        app = server.streamable_http_app(
            streamable_http_path="/mcp",
            json_response=self.json_response,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        served = self.recorder.wrap(app)
        if self.first_list_delay_seconds:
            served = _slow_first_listing(served, self.first_list_delay_seconds)
        async with serve(served, self.reserved.listener()):
            yield server


def _slow_first_listing(app: ASGIApp, delay: float) -> ASGIApp:
    """`app`, where the first request whose body asks for `tools/list` waits `delay` seconds."""
    delayed = False

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        messages: list[Message] = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        nonlocal delayed
        if not delayed and any(b'"tools/list"' in message.get("body", b"") for message in messages):
            delayed = True
            await anyio.sleep(delay)  # the slowness under test, not a synchronisation

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await app(scope, replay, send)

    return slow


@asynccontextmanager
async def upstream_host(**kwargs: object) -> AsyncIterator[UpstreamHost]:
    with ReservedPort() as reserved:  # `running()` serves on it each time it starts
        host = UpstreamHost(reserved, **kwargs)  # type: ignore[arg-type]
        try:
            yield host
        finally:
            host.release.set()
