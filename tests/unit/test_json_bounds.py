"""JSON nesting depth is bounded, and input deep enough to exhaust recursion is refused, not raised."""

from __future__ import annotations

import json

import pytest

from service.json_bounds import JsonTooDeep, loads_bounded, nesting_depth_over


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
