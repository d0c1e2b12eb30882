"""Per-call work the SDK does by default that this service has no use for, switched off where the
SDK offers a switch. Each gives the same answers as the SDK's default.

Measured in process with `python -m bench.profile_call` (cProfile, 2026-07-28 `tools/call`): the
`Mcp-Param-*` check walked the tool's input schema twice per call (~70 us of ~700 profiled) for
tools that declare no such header, and the OpenTelemetry span took ~13 us while no exporter is
installed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mcp.server import MCPServer
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.shared.inbound import find_invalid_x_mcp_header, x_mcp_header_map


def drop_otel_spans(server: MCPServer) -> None:
    """Remove the SDK's OpenTelemetry middleware (a span per message; a no-op until an exporter is
    installed, which the service does not do). The SDK's documented opt-out: drop it from the list."""
    server.middleware[:] = [
        item for item in server.middleware if not isinstance(item, OpenTelemetryMiddleware)
    ]


class HeaderSchemaLookup:
    """`get_tool_input_schema` for the 2026-07-28 `Mcp-Param-*` check: a tool's schema only when it
    declares headers the check would compare.

    The SDK hook's contract is "the schema, or None when there is nothing to validate", and the
    check compares nothing for a schema without valid `x-mcp-header` annotations. The answer is
    remembered per schema object, so a tool replaced under the same name is looked at afresh.
    """

    def __init__(self, schema_of: Callable[[str], Mapping[str, Any] | None]) -> None:
        self._schema_of = schema_of
        self._verdicts: dict[str, tuple[object, bool]] = {}

    def __call__(self, name: str) -> Mapping[str, Any] | None:
        schema: Mapping[str, Any] | None = self._schema_of(name)
        if schema is None:
            return None
        known = self._verdicts.get(name)
        if known is None or known[0] is not schema:
            declares = bool(x_mcp_header_map(schema)) and find_invalid_x_mcp_header(schema) is None
            known = (schema, declares)
            self._verdicts[name] = known
        return schema if known[1] else None


def check_only_declared_headers(server: MCPServer) -> None:
    """Install `HeaderSchemaLookup` over the SDK's own lookup. The SDK exposes the hook on its
    low-level server only; fail loudly if that is no longer where it is."""
    lowlevel = server._lowlevel_server
    schema_of = lowlevel.get_tool_input_schema
    if schema_of is None:
        raise RuntimeError("the SDK's MCPServer no longer sets get_tool_input_schema")
    lowlevel.get_tool_input_schema = HeaderSchemaLookup(schema_of)
