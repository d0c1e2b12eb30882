"""A minimal HTTP/1.1 keep-alive client on raw asyncio streams, and the MCP request shapes it sends.

httpx costs more CPU per request than the servers under test can afford to lose on a 2-core box,
so the load generator speaks just enough HTTP itself: fixed headers, Content-Length or chunked
bodies, and incremental SSE reading for the standalone GET stream. Loopback only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

HOST = "127.0.0.1"
LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
CHART_ARGUMENTS: dict[str, Any] = {"values": [3, 1, 2]}
CONNECT_TIMEOUT = 5.0
READ_LIMIT = 1 << 20


class WireError(Exception):
    """The server answered something the generator cannot use (status, framing, closed socket)."""


class Response:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json_message(self) -> dict[str, Any]:
        """The JSON-RPC message in a JSON or single-message SSE body (a priming event has no data)."""
        body = self.body
        if body.startswith(b"{"):
            parsed: dict[str, Any] = json.loads(body)
            return parsed
        for line in body.splitlines():
            if line.startswith(b"data:") and line[5:].strip():
                message: dict[str, Any] = json.loads(line[5:])
                return message
        raise WireError(f"no JSON-RPC message in body: {body[:200]!r}")


class Connection:
    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port, limit=READ_LIMIT)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    def send(self, method: str, path: str, headers: bytes, body: bytes = b"") -> None:
        assert self.writer is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + headers + b"\r\n" + body)

    async def read_head(self) -> tuple[int, dict[str, str]]:
        assert self.reader is not None
        try:
            raw = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            raise WireError("connection closed by server") from exc
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return status, headers

    async def read_chunk(self) -> bytes:
        """One chunk of a chunked body; b"" at the end of the body."""
        assert self.reader is not None
        size_line = await self.reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0], 16)
        if size == 0:
            await self.reader.readuntil(b"\r\n")
            return b""
        data = await self.reader.readexactly(size + 2)
        return data[:-2]

    async def read_body(self, headers: dict[str, str]) -> bytes:
        assert self.reader is not None
        length = headers.get("content-length")
        if length is not None:
            return await self.reader.readexactly(int(length)) if length != "0" else b""
        if headers.get("transfer-encoding") == "chunked":
            parts = []
            while chunk := await self.read_chunk():
                parts.append(chunk)
            return b"".join(parts)
        raise WireError("response without length (connection: close is not supported)")

    async def request(self, method: str, path: str, headers: bytes, body: bytes = b"") -> Response:
        self.send(method, path, headers, body)
        status, response_headers = await self.read_head()
        return Response(status, response_headers, await self.read_body(response_headers))

    async def sse_events(self) -> AsyncIterator[bytes]:
        """The `data:` payloads of a chunked SSE body, as they arrive (not a priming event's empty
        one); ends with the body."""
        buffer = b""
        while chunk := await self.read_chunk():
            buffer += chunk.replace(b"\r\n", b"\n")
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                data = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
                if any(data):
                    yield b"\n".join(data)


def header_block(headers: dict[str, str]) -> bytes:
    return "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode()


def mcp_headers(token: str | None, *, session_id: str | None = None, version: str | None = None) -> bytes:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if session_id:
        headers["Mcp-Session-Id"] = session_id
    if version:
        headers["MCP-Protocol-Version"] = version
    return header_block(headers)


def initialize_body(request_id: int = 1) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {"elicitation": {"form": {}, "url": {}}},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        },
        separators=(",", ":"),
    ).encode()


INITIALIZED_BODY = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


def legacy_call_body(request_id: int, name: str = "ascii_chart", arguments: Any = None) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments or CHART_ARGUMENTS},
        },
        separators=(",", ":"),
    ).encode()


def modern_call_body(request_id: int, name: str = "ascii_chart", arguments: Any = None) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {
                "name": name,
                "arguments": arguments or CHART_ARGUMENTS,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
                    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
                },
            },
        },
        separators=(",", ":"),
    ).encode()


def modern_headers(token: str | None, name: str = "ascii_chart") -> bytes:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return header_block(headers)


async def open_legacy_session(conn: Connection, token: str | None) -> str:
    """initialize + notifications/initialized on `conn`; returns the Mcp-Session-Id."""
    response = await conn.request("POST", "/mcp", mcp_headers(token), initialize_body())
    session_id = response.headers.get("mcp-session-id")
    if response.status != 200 or not session_id:
        raise WireError(f"initialize failed: {response.status} {response.body[:200]!r}")
    headers = mcp_headers(token, session_id=session_id, version=LEGACY_VERSION)
    ack = await conn.request("POST", "/mcp", headers, INITIALIZED_BODY)
    if ack.status != 202:
        raise WireError(f"notifications/initialized failed: {ack.status}")
    return session_id


async def open_get_stream(conn: Connection, token: str | None, session_id: str) -> None:
    """Opens the standalone SSE stream of a legacy session on `conn` (headers read, body left open)."""
    headers = mcp_headers(token, session_id=session_id, version=LEGACY_VERSION)
    conn.send("GET", "/mcp", headers.replace(b"Content-Type: application/json\r\n", b""))
    status, response_headers = await conn.read_head()
    if status != 200 or "text/event-stream" not in response_headers.get("content-type", ""):
        raise WireError(f"GET stream refused: {status}")


def call_body(mode: str, request_id: int) -> bytes:
    """A `tools/call` of the chart tool in `mode` ("legacy" or "modern")."""
    return legacy_call_body(request_id) if mode == "legacy" else modern_call_body(request_id)


async def open_caller(port: int, token: str | None, mode: str) -> tuple[Connection, bytes]:
    """A connection ready for `tools/call` in `mode` (legacy: with its own initialized session) and
    the headers its calls carry. The connection is closed if getting it ready fails."""
    conn = Connection(port)
    try:
        await conn.open()
        if mode == "legacy":
            session_id = await open_legacy_session(conn, token)
            return conn, mcp_headers(token, session_id=session_id, version=LEGACY_VERSION)
        return conn, modern_headers(token)
    except BaseException:
        conn.close()
        raise
