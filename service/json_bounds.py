"""JSON parsed with a bound on nesting depth, so deep input is a clean refusal, never a RecursionError,
and with finite numbers only.

Python's `json` reads `NaN`, `Infinity` and `-Infinity`, which JSON does not have, and reads a
number past a float's range (`1e400`) as infinity; so does the MCP SDK's parser. Such a value
crashes a tool doing arithmetic, and in gateway mode the upstream refuses the forwarded call. They
are refused here as malformed JSON.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn


class JsonTooDeep(ValueError):
    """JSON nested deeper than the limit allows."""


class JsonNotFinite(ValueError):
    """JSON holding `NaN`, `Infinity`, `-Infinity` or a number beyond a float's range."""


def _refuse_constant(name: str) -> NoReturn:
    raise JsonNotFinite(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonNotFinite(f"the number {text[:32]} is beyond a float's range")
    return value


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
    """`json.loads`, raising `JsonTooDeep` for input nested over `max_depth`, `JsonNotFinite` for a
    number that is not finite (ValueError when invalid). The parsed value is walked only when the
    text has more openers than `max_depth`."""
    try:
        value = json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError as exc:
        raise JsonTooDeep(f"JSON nested more than {max_depth} deep") from exc
    if openers(data) > max_depth and nesting_depth_over(value, max_depth):
        raise JsonTooDeep(f"JSON nested more than {max_depth} deep")
    return value
