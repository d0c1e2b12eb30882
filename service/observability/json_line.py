"""A small JSON encoder for log lines: one flat object a line, every value bounded, valid UTF-8.

Most of a log line is known before the line is: the keys, the level and logger name, the time to
the second. `JsonLine` keeps those parts as ready text and encodes only the values, most of which
are short strings with nothing to escape, so they are quoted as they are after one search.

What it guarantees, whatever the value:
- strings longer than MAX_STRING_CHARS are cut there and marked `…[truncated]`;
- `"`, `\\`, control characters (U+0000-U+001F, U+007F), U+2028/U+2029 and lone surrogates are
  escaped, so a line is one line of valid UTF-8 that any JSON parser reads;
- lists, tuples and mappings are encoded MAX_DEPTH levels deep and MAX_ITEMS items wide, then
  summarised as text; NaN and infinities become strings (JSON has no such numbers);
- anything else is its `str()`, bounded like a string; an integer too large to print is a marker.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

MAX_STRING_CHARS = 8192
MAX_ITEMS = 64
MAX_DEPTH = 4
TRUNCATED = "…[truncated]"

_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f\x7f\u2028\u2029\ud800-\udfff]')
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def string(text: str) -> str:
    """`text` as a JSON string, cut at MAX_STRING_CHARS."""
    if len(text) > MAX_STRING_CHARS:
        text = text[:MAX_STRING_CHARS] + TRUNCATED
    if _NEEDS_ESCAPE.search(text) is None:
        return '"' + text + '"'
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def value(item: Any, depth: int = 0) -> str:
    """Any value as JSON text, bounded as the module says."""
    kind = type(item)
    if kind is str:
        return string(item)
    if item is None:
        return "null"
    if item is True:
        return "true"
    if item is False:
        return "false"
    if isinstance(item, int):
        try:
            return int.__repr__(item)
        except ValueError:  # more digits than the interpreter prints
            return string(f"[integer of {item.bit_length()} bits]")
    if isinstance(item, float):
        return float.__repr__(item) if math.isfinite(item) else string(float.__repr__(item))
    if isinstance(item, str):
        return string(str.__str__(item))
    if isinstance(item, Mapping | list | tuple):
        if depth >= MAX_DEPTH:
            return string(_summary(item))
        if isinstance(item, Mapping):
            return _object(item.items(), len(item), depth + 1)
        return _array(item, depth + 1)
    return string(str(item))


def _object(items: Iterable[tuple[Any, Any]], size: int, depth: int) -> str:
    parts = []
    for index, (key, item) in enumerate(items):
        if index == MAX_ITEMS:
            parts.append(f'"…":{string(f"{size - MAX_ITEMS} more")}')
            break
        parts.append(string(key if type(key) is str else str(key)) + ":" + value(item, depth))
    return "{" + ",".join(parts) + "}"


def _array(items: list[Any] | tuple[Any, ...], depth: int) -> str:
    parts = [value(item, depth) for item in items[:MAX_ITEMS]]
    if len(items) > MAX_ITEMS:
        parts.append(string(f"…{len(items) - MAX_ITEMS} more"))
    return "[" + ",".join(parts) + "]"


def _summary(item: Mapping[Any, Any] | list[Any] | tuple[Any, ...]) -> str:
    return f"[{type(item).__name__} of {len(item)} items]"


class JsonLine:
    """Builds `{"time":…,"level":…,"logger":…,"message":…, more fields}` from ready-made parts."""

    # Parts kept ready: (level, logger) pairs and field names are the code's, a small set.
    MAX_READY = 1024

    def __init__(self) -> None:
        self._heads: dict[tuple[str, str], str] = {}
        self._keys: dict[str, str] = {}

    def head(self, level: str, logger: str) -> str:
        """The text between the time and the message, for this level and logger."""
        head = self._heads.get((level, logger))
        if head is None:
            head = f',"level":{string(level)},"logger":{string(logger)},"message":'
            if len(self._heads) < self.MAX_READY:
                self._heads[(level, logger)] = head
        return head

    def key(self, name: str) -> str:
        """`,"name":`, the text before a field's value."""
        ready = self._keys.get(name)
        if ready is None:
            ready = "," + string(name) + ":"
            if len(self._keys) < self.MAX_READY:
                self._keys[name] = ready
        return ready

    def encode(
        self, time: str, level: str, logger: str, message: str, fields: Iterable[tuple[str, Any]]
    ) -> str:
        """One line; `time` is already ISO 8601 (quoted here), `fields` are key and value pairs."""
        return self.join(
            time,
            level,
            logger,
            message,
            [self.key(name) + (string(item) if type(item) is str else value(item)) for name, item in fields],
        )

    def join(self, time: str, level: str, logger: str, message: str, fields: list[str]) -> str:
        """One line from fields already encoded as `,"name":value` (`key(name)` + `value(item)`)."""
        return '{"time":"' + time + '"' + self.head(level, logger) + string(message) + "".join(fields) + "}"
