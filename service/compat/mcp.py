"""Workarounds for the `mcp` SDK (docs/adr/0005-mcp-sdk-per-call-defaults.md): two SDK defaults
that cost every tool call and that the service has no use for, each off on an unchecked version.

The SDK's OpenTelemetry span per message: the SDK ships `OpenTelemetryMiddleware` first in every
server's public `middleware` list ("drop it from this list to opt out", its docs say), but the class
lives in a private module. Without an exporter the span records nothing.

The 2026-07-28 `Mcp-Param-*` check: for every `tools/call` with arguments, the SDK asks its
low-level server's `get_tool_input_schema` hook for the tool's input schema and walks it twice to
find `x-mcp-header` annotations, even for the tools (all of ours) that declare none. The hook's
contract is "the schema, or None when there is nothing to validate", and the check compares
nothing for a schema without valid annotations; `HeaderSchemaLookup` answers None for those. The
SDK exposes the hook on its low-level server only, which `MCPServer` keeps in a private attribute.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from importlib.metadata import version
from typing import Any

from mcp.server import MCPServer
from mcp.shared.inbound import find_invalid_x_mcp_header, x_mcp_header_map

logger = logging.getLogger(__name__)

# SDK versions the workaround was checked against; on any other the SDK's default stays.
CHECKED_VERSIONS = frozenset({"2.3.0"})

SchemaLookup = Callable[[str], Mapping[str, Any] | None]


def sdk_version() -> str:
    return version("mcp")


class HeaderSchemaLookup:
    """`get_tool_input_schema` answering a tool's schema only when it declares headers the check
    would compare. The answer is remembered per schema object, so a tool replaced under the same
    name is looked at afresh."""

    def __init__(self, schema_of: SchemaLookup) -> None:
        self._schema_of = schema_of
        self._verdicts: dict[str, tuple[object, bool]] = {}

    def __call__(self, name: str) -> Mapping[str, Any] | None:
        schema = self._schema_of(name)
        if schema is None:
            return None
        known = self._verdicts.get(name)
        if known is None or known[0] is not schema:
            declares = bool(x_mcp_header_map(schema)) and find_invalid_x_mcp_header(schema) is None
            known = (schema, declares)
            self._verdicts[name] = known
        return schema if known[1] else None


def otel_middleware_class() -> type | None:
    """The SDK's span-per-message middleware class, or None when it is no longer where it was."""
    try:
        from mcp.server._otel import OpenTelemetryMiddleware
    except ImportError:
        return None
    return OpenTelemetryMiddleware


def drop_otel_spans(server: MCPServer, *, sdk: str | None = None) -> bool:
    """Remove the SDK's span-per-message middleware from `server.middleware`; False (nothing
    removed) on an SDK version this was not checked against, or when the class cannot be found."""
    running = sdk or sdk_version()
    otel = otel_middleware_class()
    if running not in CHECKED_VERSIONS or otel is None:
        logger.info("mcp %s: the SDK's span per MCP message stays on", running)
        return False
    server.middleware[:] = [item for item in server.middleware if not isinstance(item, otel)]
    return True


def schema_lookup(server: MCPServer) -> SchemaLookup | None:
    """The hook the SDK's `Mcp-Param-*` check asks for a tool's schema."""
    lookup: SchemaLookup | None = server._lowlevel_server.get_tool_input_schema
    return lookup


def check_only_declared_headers(server: MCPServer, *, sdk: str | None = None) -> bool:
    """Put `HeaderSchemaLookup` over the SDK's own lookup; False (and the SDK's default kept) on an
    SDK version this was not checked against, or when the SDK no longer sets the hook."""
    running = sdk or sdk_version()
    if running not in CHECKED_VERSIONS:
        logger.info(
            "mcp %s: the Mcp-Param-* schema lookup workaround is off (checked: %s)",
            running,
            ", ".join(sorted(CHECKED_VERSIONS)),
        )
        return False
    schema_of = schema_lookup(server)
    if schema_of is None:
        logger.warning("mcp %s sets no get_tool_input_schema: the schema lookup workaround is off", running)
        return False
    server._lowlevel_server.get_tool_input_schema = HeaderSchemaLookup(schema_of)
    return True
