"""The tool-output cap holds for an upstream's tools served through the gateway too, and the
upstream's answers are read only up to `UPSTREAM_MAX_RESPONSE_BYTES`, in both of its answer styles
(one JSON body, or an SSE stream)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.gateway.test_gateway import PLANS, gateway_settings, text_of, user_token
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.service import run_service
from tests.support.upstream import upstream_host

ANSWER_STYLES = [False, True]
STYLE_IDS = ["sse-answers", "json-answers"]


@pytest.fixture
def plans_file(tmp_path: Path) -> Path:
    path = tmp_path / "plans.toml"
    path.write_text(PLANS, encoding="utf-8")
    return path


async def test_an_upstream_result_over_the_cap_is_a_tool_error(database_url: str, plans_file: Path) -> None:
    async with upstream_host() as upstream, upstream.running():
        settings = gateway_settings(upstream, plans_file, max_tool_output_bytes=2048)
        async with run_service(database_url, **settings) as service:
            token = await user_token(service, "gwcap")
            async with probed_client(service.mcp_url, token, ClientProbe()) as client:
                small = await client.call_tool("echo", {"text": "hi"})
                big = await client.call_tool("echo", {"text": "x" * 4096})
    assert not small.is_error and text_of(small) == "echo: hi"
    assert big.is_error
    assert "over this service's limit of 2048 bytes" in text_of(big)


@pytest.mark.parametrize("where", ["result_meta", "item_meta", "item_annotations"])
async def test_bytes_outside_the_content_count_toward_the_cap(
    database_url: str, plans_file: Path, where: str
) -> None:
    """The cap measures the whole result as sent: `_meta` and annotations too, not only the text."""
    async with upstream_host() as upstream, upstream.running():
        settings = gateway_settings(upstream, plans_file, max_tool_output_bytes=2048)
        async with run_service(database_url, **settings) as service:
            token = await user_token(service, "gwmeta")
            async with probed_client(service.mcp_url, token, ClientProbe()) as client:
                small = await client.call_tool("padded", {"where": where, "n": 100})
                big = await client.call_tool("padded", {"where": where, "n": 4096})
    assert not small.is_error and text_of(small) == "small"
    if where == "result_meta":
        assert (small.meta or {}).get("blob") == "m" * 100, "a result under the cap passes whole, `_meta` too"
    assert big.is_error
    assert "blob" not in (big.meta or {})
    assert "over this service's limit of 2048 bytes" in text_of(big)
    assert len(big.model_dump_json(by_alias=True)) < 2048


@pytest.mark.parametrize("json_response", ANSWER_STYLES, ids=STYLE_IDS)
async def test_an_upstream_answer_over_the_response_limit_is_cut_off(
    database_url: str, plans_file: Path, json_response: bool
) -> None:
    """Under the cap it passes (`big_text` sends its text twice: as content and as structured
    content); over the cap but under the response limit, the cap refuses it; far
    over the response limit, reading stops at the limit and the call is a tool error that says so."""
    async with upstream_host(json_response=json_response) as upstream, upstream.running():
        settings = gateway_settings(
            upstream, plans_file, max_tool_output_bytes=32 * 1024, upstream_max_response_bytes=64 * 1024
        )
        async with run_service(database_url, **settings) as service:
            token = await user_token(service, "gwhuge")
            async with probed_client(service.mcp_url, token, ClientProbe()) as client:
                fits = await client.call_tool("big_text", {"n": 10_000})
                over_cap = await client.call_tool("big_text", {"n": 20_000})
                huge = await client.call_tool("big_text", {"n": 8 * 1024 * 1024})
                after = await client.call_tool("echo", {"text": "still here"})
    assert not fits.is_error and text_of(fits) == "x" * 10_000
    assert over_cap.is_error and "over this service's limit of 32768 bytes" in text_of(over_cap)
    assert huge.is_error
    assert text_of(huge) == (
        "The upstream server's answer to big_text was over 65536 bytes, this service's limit, "
        "and was dropped; ask for less (for example a shorter input)."
    )
    assert not after.is_error and text_of(after) == "echo: still here", "the pool still works"


async def test_an_endless_upstream_stream_is_cut_off_at_the_limit(
    database_url: str, plans_file: Path
) -> None:
    """An SSE answer that never ends (here: progress notifications forever) is read up to the limit,
    not until the call's timeout."""
    async with upstream_host() as upstream, upstream.running():
        settings = gateway_settings(
            upstream,
            plans_file,
            max_tool_output_bytes=32 * 1024,
            upstream_max_response_bytes=64 * 1024,
            upstream_timeout_seconds=20,
        )
        async with run_service(database_url, **settings) as service:
            token = await user_token(service, "gwchatter")
            async with probed_client(service.mcp_url, token, ClientProbe()) as client:
                endless = await client.call_tool("chatter", {})
                after = await client.call_tool("echo", {"text": "still here"})
    assert endless.is_error
    assert "answer to chatter was over 65536 bytes" in text_of(endless)
    assert not after.is_error
