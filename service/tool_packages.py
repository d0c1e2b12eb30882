"""Loading tool packages named in settings or (when enabled) advertised by installed distributions."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from service.billing.plans import PlanCatalog
from service.paywall.toolset import ToolSet

ENTRY_POINT_GROUP = "paid_mcp.tools"


class ToolPackageError(Exception):
    """A tool package cannot be used; the message names it and says why."""


def load_tool_set(spec: str) -> ToolSet:
    """`package.module:attribute` -> the `ToolSet` it names."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ToolPackageError(f"tool package {spec!r} must look like 'package.module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolPackageError(f"tool package {spec!r}: cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:  # its own code failed while importing: name it, as an entry point's is
        raise ToolPackageError(
            f"tool package {spec!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    tool_set = getattr(module, attribute, None)
    if not isinstance(tool_set, ToolSet):
        raise ToolPackageError(f"tool package {spec!r}: {attribute!r} is not a service.tools.ToolSet")
    return tool_set


def load_tools(
    specs: list[str],
    catalog: PlanCatalog,
    *,
    entry_points_enabled: bool = False,
    entry_point_group: str = ENTRY_POINT_GROUP,
) -> ToolSet:
    """Every configured tool set, merged; duplicate names and unknown plans are errors.

    Tool sets advertised by installed distributions (`entry_point_group`) join only when
    `entry_points_enabled` (TOOL_ENTRY_POINTS): installing a package must not silently add tools,
    free ones included, to what the service sells.
    """
    sources = {spec: load_tool_set(spec) for spec in specs}
    advertised = entry_points(group=entry_point_group) if entry_points_enabled else ()
    for entry_point in advertised:
        try:
            loaded = entry_point.load()
        except Exception as exc:
            raise ToolPackageError(
                f"entry point {entry_point.name!r} ({entry_point.value}) failed: {exc}"
            ) from exc
        if not isinstance(loaded, ToolSet):
            raise ToolPackageError(f"entry point {entry_point.name!r} ({entry_point.value}) is not a ToolSet")
        sources.setdefault(entry_point.value, loaded)
    merged = ToolSet()
    origin: dict[str, str] = {}
    for source, tool_set in sources.items():
        for spec in tool_set.tools:
            if spec.name in origin:
                raise ToolPackageError(
                    f"tool {spec.name!r} comes from both {origin[spec.name]!r} and {source!r}"
                )
            origin[spec.name] = source
            merged.tools.append(spec)
    for name, paid in merged.paid_tools.items():
        unknown = [plan for plan in paid.plans if catalog.get(plan) is None]
        if unknown:
            raise ToolPackageError(f"paid tool {name!r} ({origin[name]}) names unknown plans {unknown}")
    return merged
