"""Talking to the upstream MCP server: discovering its tools and forwarding one call.

Connection policy: one HTTP connection pool (an `httpx2` transport) for the life of the app, and
a fresh MCP client per forwarded call over that pool. A per-call client is what stays correct when
many users call at once (nothing shared but sockets) and when the upstream restarts (there is no
long-lived session to notice is dead and re-open: the next call simply connects again). The era
found at start-up is reused: on a 2026-07-28 upstream a call costs no handshake (the discovery
result is adopted); a 2025-11-25-only upstream costs one `initialize` per call.

The upstream only ever sees its own credential (`UPSTREAM_MCP_AUTHORIZATION`) and, if configured,
the signed `X-Paid-MCP-User` header, bound to the call's tool name and arguments: each call's
headers are built here, from settings and the verified caller id, never copied from the request.

Each call reads at most `UPSTREAM_MAX_RESPONSE_BYTES` of each upstream answer
(`service/gateway/response_limit.py`); past that the call ends with a tool error saying so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio
import httpx2
import mcp_types as t
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT

from service.gateway.response_limit import ResponseLimit
from service.gateway.signing import USER_HEADER, sign_user_header

logger = logging.getLogger("service.gateway")

Progress = ProgressFnT
MAX_TOOL_PAGES = 100  # a bound on a misbehaving upstream's pagination, not a real-world limit
# Reading the tools at start-up gets at least this long: a bound chosen for a fast tool's calls
# should not stop a replica from starting while the upstream (or this machine) is slow to answer.
MIN_LIST_TOOLS_SECONDS = 10.0


class UpstreamUnavailable(Exception):
    """The upstream could not be reached or refused to list its tools; the message names it."""


@dataclass(frozen=True)
class UpstreamConfig:
    url: str
    authorization: str | None
    user_header_secret: str | None
    timeout_seconds: float
    max_response_bytes: int


@dataclass(frozen=True)
class ForwardedCall:
    """One tool call on a user's behalf: what the signed user header is bound to."""

    user_id: str
    name: str
    arguments: dict[str, object]


def error_result(text: str) -> t.CallToolResult:
    return t.CallToolResult(content=[t.TextContent(type="text", text=text)], is_error=True)


class UpstreamClient:
    def __init__(self, config: UpstreamConfig, transport: httpx2.AsyncBaseTransport) -> None:
        self._config = config
        self._transport = transport
        self._mode = "auto"
        self._discover: t.DiscoverResult | None = None

    @property
    def protocol_version(self) -> str:
        """The era calls use: 'auto' before discovery, then the negotiated version or 'legacy'."""
        return self._mode

    async def aclose(self) -> None:
        await self._transport.aclose()

    def _limit(self) -> ResponseLimit:
        """A fresh per-call bound on the upstream's answers, over the shared pool."""
        return ResponseLimit(self._transport, self._config.max_response_bytes)

    def _client(
        self,
        call: ForwardedCall | None,
        limit: ResponseLimit,
        *,
        timeout: float,
        mode: str | None = None,
    ) -> Client:
        headers: dict[str, str] = {}
        if self._config.authorization:
            headers["Authorization"] = self._config.authorization
        if call is not None and self._config.user_header_secret:
            headers[USER_HEADER] = sign_user_header(
                self._config.user_header_secret, call.user_id, tool_name=call.name, arguments=call.arguments
            )
        # A light per-call client over the shared transport: it owns no sockets, so it needs no close.
        http = httpx2.AsyncClient(
            transport=limit,
            headers=headers,
            timeout=httpx2.Timeout(timeout),
        )
        chosen = mode or self._mode
        return Client(
            # One SSE event may be as large as a whole answer, and no larger (the SDK's default is 1 MiB).
            streamable_http_client(self._config.url, http_client=http, max_sse_event_size=limit.max_bytes),
            mode=chosen,
            prior_discover=self._discover if chosen not in ("auto", "legacy") else None,
            read_timeout_seconds=timeout,
            cache=None,
        )

    async def list_tools(self) -> list[t.Tool]:
        """Every tool the upstream offers (all pages); also settles the era later calls use."""
        limit = self._limit()
        timeout = max(self._config.timeout_seconds, MIN_LIST_TOOLS_SECONDS)
        try:
            with anyio.fail_after(timeout), limit.abort:
                async with self._client(None, limit, timeout=timeout, mode="auto") as client:
                    discover = client.session.discover_result
                    self._mode = client.protocol_version if discover is not None else "legacy"
                    self._discover = discover
                    tools: list[t.Tool] = []
                    cursor: str | None = None
                    for _ in range(MAX_TOOL_PAGES):
                        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if cursor is None:
                            return tools
                    raise UpstreamUnavailable(f"{self._config.url} listed more than {MAX_TOOL_PAGES} pages")
        except UpstreamUnavailable:
            raise
        except Exception as exc:  # any failure here means "cannot use this upstream"
            why = f"its answer was {limit.refused}" if limit.refused is not None else _describe(exc)
            raise UpstreamUnavailable(
                f"cannot list the tools of the upstream MCP server {self._config.url}: {why}"
            ) from exc
        # Only a refused answer cancels `limit.abort` and ends up here.
        url = self._config.url
        raise UpstreamUnavailable(
            f"cannot list the tools of the upstream MCP server {url}: its answer was {limit.refused}"
        )

    async def call_tool(
        self, user_id: str, name: str, arguments: dict[str, object], progress: Progress
    ) -> t.CallToolResult:
        """The upstream's result unchanged, or an error result saying why there is none.

        Never raises for upstream trouble: a JSON-RPC error, a timeout, an unreachable upstream or
        an answer over the size limit all become an `isError` result the caller (and its model) can
        read, bounded in time and in bytes read.
        """
        timeout = self._config.timeout_seconds
        limit = self._limit()
        try:
            with anyio.fail_after(timeout), limit.abort:
                call = ForwardedCall(user_id, name, arguments)
                async with self._client(call, limit, timeout=timeout) as client:
                    return await client.call_tool(name, arguments, progress_callback=progress)
        except Exception as exc:  # transport failures arrive in many shapes
            if limit.refused is None:
                return _failure_result(name, _unwrap(exc), timeout)
        # Here only when an answer was refused: it cancelled `limit.abort`, or broke the call.
        logger.warning("upstream tool %s: its answer was %s", name, limit.refused)
        return error_result(f"The upstream server's answer to {name} was {limit.refused}.")


def _failure_result(name: str, exc: BaseException, timeout: float) -> t.CallToolResult:
    if isinstance(exc, TimeoutError):
        logger.warning("upstream tool %s timed out after %s s", name, timeout)
        return error_result(f"The upstream server did not answer {name} within {timeout:g} s.")
    if isinstance(exc, MCPError):
        logger.info("upstream tool %s: JSON-RPC error %s: %s", name, exc.code, exc.error.message)
        return error_result(f"The upstream server refused {name}: {exc.error.message} (error {exc.code}).")
    logger.warning("upstream tool %s failed: %s", name, _describe(exc))
    return error_result(f"The upstream server is unreachable right now; {name} did not run.")


def _unwrap(exc: BaseException) -> BaseException:
    """The SDK's task groups wrap the real failure in (nested) single-member exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    """One line for logs and start-up errors."""
    exc = _unwrap(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
