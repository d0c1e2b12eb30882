"""`result_size` is the length of the JSON a tool result is sent as, every field included, and
`text_bytes` (the cheap first check) never exceeds it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp_types import Annotations, CallToolResult, ImageContent, TextContent

from service.mcp_server.output_cap import result_size, text_bytes

RESULTS = [
    CallToolResult(content=[TextContent(text="echo: hi")]),
    CallToolResult(content=[TextContent(text='héllo "quoted"\n\u0001 ✓')], structured_content={"n": 1}),
    CallToolResult(content=[TextContent(text="small")], _meta={"blob": "m" * 500}),
    CallToolResult(content=[TextContent(text="small", _meta={"blob": "m" * 500})]),
    CallToolResult(content=[TextContent(text="small", annotations=Annotations(last_modified="m" * 500))]),
    CallToolResult(content=[ImageContent(data="aGk=" * 100, mime_type="image/png")], is_error=True),
]


def wire_json(result: CallToolResult | dict[str, Any]) -> bytes:
    """The result as the SDK puts it on the wire: a model's non-None fields by alias."""
    body = result
    if isinstance(result, CallToolResult):
        body = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("result", RESULTS + [json.loads(wire_json(result)) for result in RESULTS])
def test_the_size_is_that_of_the_json_sent(result: CallToolResult | dict[str, Any]) -> None:
    assert result_size(result) == len(wire_json(result))
    assert text_bytes(result) <= result_size(result)


def test_padding_outside_the_text_counts() -> None:
    plain = result_size(RESULTS[0])
    for padded in RESULTS[2:5]:
        assert result_size(padded) > plain + 500
        assert text_bytes(padded) == len("small")
