"""`/mcp` bounds: tool input schemas, tool output size, request body size, JSON depth, non-finite
numbers, JSON-RPC ids."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from service.example_tools.catalog import MAX_TEXT_CHARACTERS
from tests.support.mcp_http import legacy_session
from tests.support.raw_http import post_unfinished
from tests.support.service import RunningService, run_service

MODERN = "2026-07-28"


def schema_problems(schema: Any, where: str = "") -> Iterator[str]:
    """Every string without maxLength and array without maxItems in a JSON Schema, by location."""
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            yield from schema_problems(item, f"{where}[{index}]")
        return
    if not isinstance(schema, dict):
        return
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "string" in kinds and "maxLength" not in schema and "enum" not in schema and "const" not in schema:
        yield f"{where or '/'}: string without maxLength"
    if "array" in kinds and "maxItems" not in schema:
        yield f"{where or '/'}: array without maxItems"
    for key, value in schema.items():
        if isinstance(value, (dict, list)):
            yield from schema_problems(value, f"{where}/{key}")


async def signed_in(service: RunningService, name: str) -> str:
    await service.add_user(name)
    return (await service.personal_token(name)).secret


async def test_every_served_tool_bounds_its_strings_and_arrays(service: RunningService) -> None:
    token = await signed_in(service, "schema-walker")
    async with service.mcp_client(token) as client:
        tools = (await client.list_tools()).tools
    assert {"text_stats", "ascii_chart", "password_audit", "sql_explain"} <= {tool.name for tool in tools}
    problems = [f"{tool.name}{problem}" for tool in tools for problem in schema_problems(tool.input_schema)]
    assert problems == []


async def test_oversize_text_is_refused_by_the_schema(service: RunningService) -> None:
    token = await signed_in(service, "long-text")
    async with service.mcp_client(token) as client:
        result = await client.call_tool("text_stats", {"text": "a" * (MAX_TEXT_CHARACTERS + 1)})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "text" in text and f"at most {MAX_TEXT_CHARACTERS} characters" in text


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_output_over_the_cap_is_a_tool_error(database_url: str, mode: str) -> None:
    async with run_service(database_url, max_tool_output_bytes=2048) as service:
        token = await signed_in(service, "big-output")
        # Five distinct long words: top_words repeats them in the text and the structured content.
        words = " ".join(letter * 900 for letter in "abcde")
        async with service.mcp_client(token, mode=mode) as client:
            small = await client.call_tool("text_stats", {"text": "a few words"})
            big = await client.call_tool("text_stats", {"text": words})
    assert not small.is_error
    assert big.is_error
    assert big.structured_content is None
    text = big.content[0].text  # type: ignore[union-attr]
    assert "over this service's limit of 2048 bytes" in text


def tool_call_body(arguments: Any, request_id: Any = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": "text_stats",
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }


def mcp_headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "text_stats",
    }


async def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(service: RunningService) -> None:
    token = await signed_in(service, "big-declared")
    declared = service.settings.http.max_request_body_bytes + 1
    status, body = await post_unfinished(
        service.base_url, "/mcp", mcp_headers(token), declared_length=declared
    )
    assert status == 413
    assert json.loads(body)["error"] == "request_too_large"


async def test_a_chunked_body_over_the_limit_is_refused_before_it_ends(service: RunningService) -> None:
    """Over this service's limit and under the SDK's own (4 MiB), which would wait for the rest."""
    token = await signed_in(service, "big-chunked")
    chunks = [b" " * (64 * 1024)] * (service.settings.http.max_request_body_bytes // (64 * 1024) + 2)
    status, body = await post_unfinished(service.base_url, "/mcp", mcp_headers(token), chunks=chunks)
    assert status == 413
    assert json.loads(body)["error"] == "request_too_large"


@pytest.mark.parametrize("depth", [100, 5000], ids=["over-the-limit", "past-python-recursion"])
async def test_deeply_nested_json_is_a_400(service: RunningService, depth: int) -> None:
    token = await signed_in(service, f"deep-{depth}")
    nested = "[" * depth + "]" * depth
    body = json.dumps(tool_call_body({"text": "x", "extra": "__NESTED__"})).replace('"__NESTED__"', nested)
    async with service.http() as http:
        answer = await http.post("/mcp", content=body, headers=mcp_headers(token))
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == -32700


NOT_FINITE = ["NaN", "Infinity", "-Infinity", "1e400"]


def with_raw_number(body: dict[str, Any], number: str) -> str:
    """`body` as JSON text, its `__NUMBER__` placeholder replaced with `number` as written."""
    return json.dumps(body).replace('"__NUMBER__"', number)


@pytest.mark.parametrize("number", NOT_FINITE)
async def test_a_number_that_is_not_finite_is_a_parse_error_in_both_eras(
    service: RunningService, number: str
) -> None:
    token = await signed_in(service, "not-finite")
    legacy_headers = await legacy_session(service, token)
    arguments = {"text": "hi", "weight": "__NUMBER__"}
    legacy_call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "text_stats", "arguments": arguments},
    }
    async with service.http() as http:
        answers = [
            await http.post(
                "/mcp", content=with_raw_number(tool_call_body(arguments), number), headers=mcp_headers(token)
            ),
            await http.post("/mcp", content=with_raw_number(legacy_call, number), headers=legacy_headers),
        ]
    for answer in answers:
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == -32700
        assert "Parse error" in answer.json()["error"]["message"]


@pytest.mark.parametrize("number", ["1.5", "1e300", "-1e300"])
async def test_a_finite_number_still_reaches_the_tool(service: RunningService, number: str) -> None:
    token = await signed_in(service, "finite")
    body = with_raw_number(tool_call_body({"text": "one two two", "weight": "__NUMBER__"}), number)
    async with service.http() as http:
        answer = await http.post("/mcp", content=body, headers=mcp_headers(token))
    assert answer.status_code == 200, answer.text
    result = only_message(answer)["result"]
    assert not result.get("isError") and result["structuredContent"]["words"] == 3, result


BAD_IDS = pytest.mark.parametrize(
    "request_id", [{"an": "object"}, 1.5, None, True], ids=["object", "float", "null", "bool"]
)


@BAD_IDS
async def test_an_unusable_request_id_gets_an_invalid_request_error(
    service: RunningService, request_id: Any
) -> None:
    headers = await legacy_session(service, await signed_in(service, "bad-id"))
    call = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "text_stats", "arguments": {"text": "hi"}},
    }
    async with service.http() as http:
        answer = await http.post("/mcp", content=json.dumps(call), headers=headers)
    assert answer.status_code == 400
    error = answer.json()
    assert error["id"] is None
    assert error["error"]["code"] == -32600
    assert "id" in error["error"]["message"]


@BAD_IDS
async def test_an_unusable_request_id_is_refused_in_the_sessionless_era_too(
    service: RunningService, request_id: Any
) -> None:
    token = await signed_in(service, "bad-id-modern")
    async with service.http() as http:
        answer = await http.post(
            "/mcp", content=json.dumps(tool_call_body({"text": "hi"}, request_id)), headers=mcp_headers(token)
        )
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == -32600


async def test_a_usable_request_still_runs_behind_the_checks(service: RunningService) -> None:
    token = await signed_in(service, "good-id")
    async with service.http() as http:
        answer = await http.post(
            "/mcp",
            content=json.dumps(tool_call_body({"text": "one two two"}, "req-1")),
            headers=mcp_headers(token),
        )
    assert answer.status_code == 200
    assert "two" in answer.text


@pytest.mark.parametrize("path", ["/register", "/login"])
async def test_other_routes_refuse_an_oversize_body_too(service: RunningService, path: str) -> None:
    declared = service.settings.http.max_request_body_bytes + 1
    status, body = await post_unfinished(
        service.base_url, path, {"Content-Type": "application/json"}, declared_length=declared
    )
    assert status == 413
    assert json.loads(body)["error"] == "request_too_large"


def only_message(answer: httpx.Response) -> Any:
    """The one JSON-RPC message of a JSON or SSE answer."""
    if answer.headers["content-type"].startswith("application/json"):
        return answer.json()
    [data] = [line[5:] for line in answer.text.splitlines() if line.startswith("data:") and line[5:].strip()]
    return json.loads(data)


def modern_prompt_request(name: str) -> dict[str, Any]:
    body = tool_call_body({}, "p-1")
    body["method"] = "prompts/get"
    body["params"] = {"name": name, "_meta": body["params"]["_meta"]}
    return body


async def test_an_unknown_prompt_is_invalid_params_not_a_logged_crash(
    service: RunningService, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK answers `prompts/get` of a name it does not serve with -32603 and a traceback."""
    token = await signed_in(service, "prompt-guesser")
    headers = await legacy_session(service, token)
    modern = {**mcp_headers(token), "Mcp-Method": "prompts/get", "Mcp-Name": "nope"}
    legacy_get = {"jsonrpc": "2.0", "id": 7, "method": "prompts/get", "params": {"name": "nope"}}
    async with service.http() as http:
        answers = [
            await http.post("/mcp", content=json.dumps(modern_prompt_request("nope")), headers=modern),
            await http.post("/mcp", content=json.dumps(legacy_get), headers=headers),
        ]
        # Without an id it asks nothing: dropped, as the SDK drops any notification it has no use for.
        notice = {key: value for key, value in legacy_get.items() if key != "id"}
        notified = await http.post("/mcp", content=json.dumps(notice), headers=headers)
    errors = [only_message(answer)["error"] for answer in answers]
    assert [error["code"] for error in errors] == [-32602, -32602]
    assert all("Unknown prompt: 'nope'" in error["message"] for error in errors)
    assert notified.status_code == 202
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []


async def test_a_wrong_method_or_accept_header_is_explained_in_the_sessionless_era(
    service: RunningService,
) -> None:
    """The SDK's 2026-07-28 path answers both with a status and an empty body."""
    token = await signed_in(service, "no-accept")
    headers = mcp_headers(token)
    html_only = {**headers, "Accept": "text/html"}
    async with service.http() as http:
        wrong_method = await http.get("/mcp", headers=headers)
        not_acceptable = await http.post(
            "/mcp", content=json.dumps(tool_call_body({"text": "hi"})), headers=html_only
        )
        fine = await http.post("/mcp", content=json.dumps(tool_call_body({"text": "hi"})), headers=headers)
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "POST"
    assert wrong_method.json()["error"]["message"] == (
        "Method Not Allowed: send MCP requests to this endpoint with POST"
    )
    assert not_acceptable.status_code == 406
    assert not_acceptable.json()["error"]["message"] == (
        "Not Acceptable: the Accept header must list application/json and text/event-stream"
    )
    assert fine.status_code == 200
