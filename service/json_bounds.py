"""JSON parsed with a bound on nesting depth, so deep input is a clean refusal, never a RecursionError."""

from __future__ import annotations

import json
from typing import Any


class JsonTooDeep(ValueError):
    """JSON nested deeper than the limit allows."""


def nesting_depth_over(value: Any, limit: int) -> bool:
    """Whether `value` (parsed JSON) nests objects and arrays more than `limit` deep; iterative."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def openers(data: str | bytes) -> int:
    """How many `{` and `[` the text holds: no parsed value nests deeper than that (each object or
    array opens with one; those inside strings only raise the count)."""
    if isinstance(data, bytes):
        return data.count(b"{") + data.count(b"[")
    return data.count("{") + data.count("[")


def loads_bounded(data: str | bytes, max_depth: int) -> Any:
    """`json.loads`, raising `JsonTooDeep` for input nested over `max_depth` (ValueError when invalid).
    The parsed value is walked only when the text has more openers than `max_depth`."""
    try:
        value = json.loads(data)
    except RecursionError as exc:
        raise JsonTooDeep(f"JSON nested more than {max_depth} deep") from exc
    if openers(data) > max_depth and nesting_depth_over(value, max_depth):
        raise JsonTooDeep(f"JSON nested more than {max_depth} deep")
    return value
