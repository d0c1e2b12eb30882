"""The log line encoder: valid JSON on one line of UTF-8, whatever the values, and bounded."""

from __future__ import annotations

import json
import math
from enum import IntEnum, StrEnum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.observability.json_line import (
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_STRING_CHARS,
    TRUNCATED,
    JsonLine,
    string,
    value,
)


def one_line(
    time: str = "2026-12-02T10:00:00.000+00:00", message: str = "m", **fields: Any
) -> dict[str, Any]:
    line = JsonLine().encode(time, "INFO", "service.access", message, list(fields.items()))
    assert "\n" not in line and "\r" not in line
    line.encode("utf-8")  # no lone surrogate left raw: a stream writing UTF-8 takes it
    parsed: dict[str, Any] = json.loads(line)
    return parsed


@settings(max_examples=2000, deadline=None)
@given(st.text(max_size=200))
def test_any_text_comes_back_as_it_was(text: str) -> None:
    assert one_line(message=text, field=text) == {
        "time": "2026-12-02T10:00:00.000+00:00",
        "level": "INFO",
        "logger": "service.access",
        "message": text,
        "field": text,
    }


@pytest.mark.parametrize(
    ("text", "encoded"),
    [
        ("plain /mcp", '"plain /mcp"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("line\nbreak\r\ttab", '"line\\nbreak\\r\\ttab"'),
        ("\x00\x1f\x7f", '"\\u0000\\u001f\\u007f"'),
        ("\b\f", '"\\b\\f"'),
        ("separators \u2028\u2029", '"separators \\u2028\\u2029"'),
        ("lone \ud800 surrogate", '"lone \\ud800 surrogate"'),
        ("café 😀 日本", '"café 😀 日本"'),  # other characters stay as they are, in UTF-8
    ],
)
def test_escapes(text: str, encoded: str) -> None:
    assert string(text) == encoded
    assert json.loads(encoded) == text


def test_a_long_string_is_cut_and_marked() -> None:
    long = "a" * (MAX_STRING_CHARS + 1000)
    assert one_line(message=long, field=long)["field"] == "a" * MAX_STRING_CHARS + TRUNCATED
    assert len(string("\n" * (MAX_STRING_CHARS * 2))) == 2 * MAX_STRING_CHARS + len(TRUNCATED) + 2


class Status(IntEnum):
    OK = 200


class Outcome(StrEnum):
    OK = "ok"


class Opaque:
    def __str__(self) -> str:
        return 'an "opaque" object\n'


@pytest.mark.parametrize(
    ("item", "decoded"),
    [
        (None, None),
        (True, True),
        (False, False),
        (0, 0),
        (-17, -17),
        (2**70, 2**70),
        (1.25, 1.25),
        (Status.OK, 200),
        (Outcome.OK, "ok"),
        (Opaque(), 'an "opaque" object\n'),
        ((1, "a", None), [1, "a", None]),
        ({"a": [1, 2], 3: {"b": True}}, {"a": [1, 2], "3": {"b": True}}),
    ],
)
def test_values(item: Any, decoded: Any) -> None:
    assert one_line(field=item)["field"] == decoded


def test_numbers_json_has_not_become_strings() -> None:
    line = one_line(nan=math.nan, inf=math.inf, ninf=-math.inf)
    assert line["nan"] == "nan" and line["inf"] == "inf" and line["ninf"] == "-inf"


def test_an_integer_too_large_to_print_becomes_a_marker() -> None:
    assert one_line(big=10**5000)["big"] == f"[integer of {(10**5000).bit_length()} bits]"


def test_collections_are_bounded_in_width_and_depth() -> None:
    wide = list(range(MAX_ITEMS + 10))
    assert one_line(wide=wide)["wide"] == [*range(MAX_ITEMS), "…10 more"]
    wide_map = {f"k{index}": index for index in range(MAX_ITEMS + 3)}
    decoded = one_line(wide=wide_map)["wide"]
    assert len(decoded) == MAX_ITEMS + 1 and decoded["…"] == "3 more"
    deep: Any = "bottom"
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    decoded = one_line(deep=deep)["deep"]
    for _ in range(MAX_DEPTH):
        decoded = decoded[0]
    assert decoded == "[list of 1 items]"


def test_field_names_are_escaped_too() -> None:
    weird: dict[str, Any] = {'we"ird\nkey': 1}
    assert one_line(**weird)['we"ird\nkey'] == 1
    assert value({'k"': 1}) == '{"k\\"":1}'
