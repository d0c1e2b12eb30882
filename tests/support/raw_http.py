"""A bare HTTP/1.1 POST over a socket whose body never ends, to see what a server answers before it
has the whole body (an HTTP client library waits to finish sending before it reads)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

# Long enough for a slow machine; the test fails, not hangs, when the server waits for the rest.
ANSWER_WITHIN_SECONDS = 30.0


async def post_unfinished(
    base_url: str,
    path: str,
    headers: dict[str, str],
    *,
    declared_length: int | None = None,
    chunks: list[bytes] = [],  # noqa: B006 - never mutated
) -> tuple[int, bytes]:
    """Sends the headers and `chunks` (chunked encoding unless `declared_length` is given), never the
    body's end, and returns the status and body the server answers with."""
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    reader, writer = await asyncio.open_connection(host, port)
    try:
        lines = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if declared_length is not None:
            lines.append(f"Content-Length: {declared_length}")
        else:
            lines.append("Transfer-Encoding: chunked")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        for chunk in chunks:
            writer.write(
                chunk if declared_length is not None else f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
            )
            await writer.drain()
        await writer.drain()
        return await asyncio.wait_for(_read_answer(reader), ANSWER_WITHIN_SECONDS)
    finally:
        writer.close()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return status, await reader.readexactly(length)
