"""JSON nesting depth is bounded, and input deep enough to exhaust recursion is refused, not raised;
numbers are finite."""

from __future__ import annotations

import json

import pytest

from service.json_bounds import JsonNotFinite, JsonTooDeep, loads_bounded, nesting_depth_over, openers


def test_depth_counts_objects_and_arrays() -> None:
    assert not nesting_depth_over(1, 0)
    assert not nesting_depth_over({"a": [1, {"b": []}]}, 4)
    assert nesting_depth_over({"a": [1, {"b": []}]}, 3)


@pytest.mark.parametrize("depth", [65, 100_000])
def test_too_deep_is_refused(depth: int) -> None:
    with pytest.raises(JsonTooDeep):
        loads_bounded("[" * depth + "]" * depth, 64)


def test_at_the_limit_parses() -> None:
    assert loads_bounded("[" * 64 + "]" * 64, 64) is not None
    with pytest.raises(json.JSONDecodeError):
        loads_bounded("{", 64)


@pytest.mark.parametrize("text", ['{"a": [1, {"b": []}]}', '["{[{[", {"k": "]]]"}]', '"[[[[[[["'])
def test_openers_bound_the_depth_of_what_parses(text: str) -> None:
    value = json.loads(text)
    depth = next(limit for limit in range(10) if not nesting_depth_over(value, limit))
    assert depth <= openers(text) == openers(text.encode())


def test_brackets_inside_strings_do_not_let_deep_input_through() -> None:
    deep = "[" * 65 + '"' + "}" * 70 + '"' + "]" * 65
    with pytest.raises(JsonTooDeep):
        loads_bounded(deep.encode(), 64)
    shallow_but_many = json.dumps({"text": "[" * 200})
    assert loads_bounded(shallow_but_many, 64) == {"text": "[" * 200}


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1E400"])
def test_a_number_that_is_not_finite_is_refused(number: str) -> None:
    text = f'{{"values": [1, {number}]}}'
    for data in (text, text.encode()):
        with pytest.raises(JsonNotFinite):
            loads_bounded(data, 64)


def test_finite_numbers_parse_as_before() -> None:
    text = '{"a": 1.5, "b": 1e300, "c": -1e300, "d": 1e-400, "e": 12, "f": "NaN"}'
    assert loads_bounded(text, 64) == {"a": 1.5, "b": 1e300, "c": -1e300, "d": 0.0, "e": 12, "f": "NaN"}
