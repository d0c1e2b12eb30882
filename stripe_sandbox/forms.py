"""Stripe's form encoding, parsed the way Stripe parses it.

Stripe's v1 API takes `application/x-www-form-urlencoded` bodies (and query strings) with bracketed
keys: `metadata[plan]=pro`, `line_items[0][price]=price_1`, `expand[]=subscription`. Whether a
nested value is an array or a hash is decided by the endpoint's schema, not by the syntax, so the
parser keeps every nested value as a string-keyed dict (`[]` appends become the next index) and the
typed getters below turn `{"0": ..., "1": ...}` into a list only where the endpoint expects a list.
Parameter names in errors are reported in Stripe's bracket form, e.g. `line_items[0][price]`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

from .errors import StripeError, invalid_request, parameter_missing, parameter_unknown

_SEGMENT = re.compile(r"\[([^\[\]]*)\]")

Tree = dict[str, Any]


def _split_key(key: str) -> list[str]:
    head, sep, rest = key.partition("[")
    if not sep:
        return [key]
    rest = "[" + rest
    segments = _SEGMENT.findall(rest)
    if "".join(f"[{segment}]" for segment in segments) != rest or not head:
        raise invalid_request(f"Invalid parameter name: {key}", param=key)
    return [head, *segments]


def parse_pairs(pairs: Iterable[tuple[str, str]]) -> Tree:
    """Nest flat `(key, value)` pairs into a tree of dicts and strings."""
    root: Tree = {}
    for key, value in pairs:
        segments = _split_key(key)
        node = root
        for depth, segment in enumerate(segments):
            name = segment if segment != "" else str(len(node))
            last = depth == len(segments) - 1
            if last:
                if isinstance(node.get(name), dict):
                    raise invalid_request(f"Invalid value for {key}: expected a hash.", param=key)
                node[name] = value
            else:
                child = node.setdefault(name, {})
                if not isinstance(child, dict):
                    if child == "":
                        child = {}
                        node[name] = child
                    else:
                        raise invalid_request(f"Invalid hash for {key}", param=key)
                node = child
    return root


def parse_body(body: bytes) -> Tree:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_request("Request body is not valid UTF-8.") from exc
    return parse_pairs(parse_qsl(text, keep_blank_values=True))


def parse_query(query: str) -> Tree:
    return parse_pairs(parse_qsl(query, keep_blank_values=True))


def _name(prefix: str, key: str) -> str:
    return f"{prefix}[{key}]" if prefix else key


class Params:
    """Typed, Stripe-error-raising access to one (sub)tree of request parameters."""

    def __init__(self, tree: Tree, prefix: str = "") -> None:
        self.tree = tree
        self.prefix = prefix

    def param(self, key: str) -> str:
        return _name(self.prefix, key)

    def has(self, key: str) -> bool:
        return key in self.tree

    def reject_unknown(self, allowed: Iterable[str]) -> None:
        allowed_set = set(allowed)
        for key in self.tree:
            if key not in allowed_set:
                raise parameter_unknown(self.param(key))

    def raw(self, key: str) -> Any:
        return self.tree.get(key)

    def string(self, key: str, *, required: bool = False, allow_empty: bool = False) -> str | None:
        value = self.tree.get(key)
        if value is None:
            if required:
                raise parameter_missing(self.param(key))
            return None
        if not isinstance(value, str):
            raise invalid_request(f"Invalid string: {self.param(key)}", param=self.param(key))
        if value == "" and not allow_empty:
            if required:
                raise parameter_missing(self.param(key))
            raise StripeError(
                400,
                f"You passed an empty string for '{self.param(key)}'. We assume empty values are an "
                "attempt to unset a parameter; however '" + self.param(key) + "' cannot be unset. You "
                "should remove '" + self.param(key) + "' from your request or supply a non-empty value.",
                code="parameter_invalid_empty",
                param=self.param(key),
            )
        return value

    def req_str(self, key: str) -> str:
        value = self.string(key, required=True)
        assert value is not None
        return value

    def integer(self, key: str, *, required: bool = False) -> int | None:
        value = self.string(key, required=required)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise StripeError(
                400, f"Invalid integer: {value}", code="parameter_invalid_integer", param=self.param(key)
            ) from None

    def boolean(self, key: str) -> bool | None:
        value = self.string(key)
        if value is None:
            return None
        if value in ("true", "false"):
            return value == "true"
        raise StripeError(400, f"Invalid boolean: {value}", param=self.param(key))

    def enum(self, key: str, choices: Iterable[str], *, required: bool = False) -> str | None:
        value = self.string(key, required=required)
        options = list(choices)
        if value is not None and value not in options:
            raise StripeError(
                400,
                f"Invalid {self.param(key)}: must be one of {', '.join(options)}",
                param=self.param(key),
            )
        return value

    def sub(self, key: str) -> Params | None:
        value = self.tree.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, dict):
            raise invalid_request(f"Invalid hash: {self.param(key)}", param=self.param(key))
        return Params(value, self.param(key))

    def array(self, key: str) -> list[Any] | None:
        """An array parameter: `k[0]=a&k[1]=b` or `k[]=a&k[]=b` (the same once parsed)."""
        value = self.tree.get(key)
        if value is None:
            return None
        if value == "":
            return []
        if isinstance(value, str):
            raise invalid_request(f"Invalid array: {self.param(key)}", param=self.param(key))
        if not all(index.isdigit() for index in value):
            raise invalid_request(f"Invalid array: {self.param(key)}", param=self.param(key))
        return [value[index] for index in sorted(value, key=int)]

    def str_list(self, key: str) -> list[str] | None:
        items = self.array(key)
        if items is None:
            return None
        for index, item in enumerate(items):
            if not isinstance(item, str):
                raise invalid_request(
                    f"Invalid string: {self.param(key)}[{index}]", param=f"{self.param(key)}[{index}]"
                )
        return [str(item) for item in items]

    def sub_list(self, key: str) -> list[Params] | None:
        items = self.array(key)
        if items is None:
            return None
        result = []
        for index, item in enumerate(items):
            name = f"{self.param(key)}[{index}]"
            if not isinstance(item, dict):
                raise invalid_request(f"Invalid hash: {name}", param=name)
            result.append(Params(item, name))
        return result

    def expand(self) -> list[str]:
        return self.str_list("expand") or []

    def metadata(self, key: str = "metadata") -> dict[str, str] | None:
        """Metadata as given; `""` for the whole hash or a value means "unset" (see merge_metadata)."""
        value = self.tree.get(key)
        if value is None:
            return None
        if value == "":
            return {}
        if not isinstance(value, dict):
            raise invalid_request(f"Invalid hash: {self.param(key)}", param=self.param(key))
        result: dict[str, str] = {}
        for meta_key, meta_value in value.items():
            name = f"{self.param(key)}[{meta_key}]"
            if not isinstance(meta_value, str):
                raise invalid_request(f"Invalid string: {name}", param=name)
            if len(meta_key) > 40:
                raise invalid_request(
                    f"Metadata keys can have up to 40 characters: {meta_key}", param=self.param(key)
                )
            if len(meta_value) > 500:
                raise invalid_request(
                    f"Metadata values can have up to 500 characters: {meta_key}", param=name
                )
            result[meta_key] = meta_value
        if len(result) > 50:
            raise invalid_request("Metadata can have up to 50 keys.", param=self.param(key))
        return result


def merge_metadata(
    current: dict[str, str], update: dict[str, str] | None, *, whole_cleared: bool
) -> dict[str, str]:
    """Stripe's update semantics: keys merge, an empty value deletes a key, `metadata=` clears all."""
    if update is None:
        return dict(current)
    if whole_cleared:
        return {}
    merged = dict(current)
    for key, value in update.items():
        if value == "":
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged
