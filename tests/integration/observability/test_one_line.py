"""Production logging: one line per request, and a client that leaves is a 499, not a 500."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.integration.observability import held_tools
from tests.integration.observability.observed import captured_logs, json_lines, scrape
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.service import RunningService, run_service

PACKAGES = "service.example_tools:tools,tests.integration.observability.held_tools:tools"


@pytest.fixture
async def held_service(database_url: str) -> AsyncIterator[RunningService]:
    held_tools.hold = held_tools.Hold()
    async with run_service(database_url, tool_packages=PACKAGES) as running:
        yield running


class AccessLines(logging.Handler):
    """Wakes a waiting test when the access line of a call of `tool` is logged."""

    def __init__(self, tool: str) -> None:
        super().__init__()
        self.tool = tool
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "tool", None) == self.tool:
            self.seen.set()


@contextmanager
def watching(tool: str) -> Iterator[AccessLines]:
    handler = AccessLines(tool)
    logging.getLogger("service.access").addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger("service.access").removeHandler(handler)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_tool_call_is_one_line(held_service: RunningService, mode: str) -> None:
    service = held_service
    await service.add_user("ola")
    token = (await service.personal_token("ola")).secret
    with captured_logs() as stream:
        async with probed_client(service.mcp_url, token, ClientProbe(), mode=mode) as client:
            assert not (await client.call_tool("whoami", {})).is_error
    lines = [line for line in json_lines(stream) if line["logger"].startswith("service.")]
    per_request = Counter(line["request_id"] for line in lines)
    assert per_request and max(per_request.values()) == 1, lines
    [call] = [line for line in lines if line.get("tool") == "whoami"]
    assert call["logger"] == "service.access" and call["http_status"] == 200
    assert call["outcome"] == "ok" and call["user_id"]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_client_that_leaves_mid_call_is_a_499_and_no_server_error(
    held_service: RunningService, mode: str
) -> None:
    service = held_service
    await service.add_user("lea")
    token = (await service.personal_token("lea")).secret
    hold = held_tools.hold

    async def call() -> Any:
        async with probed_client(service.mcp_url, token, ClientProbe(), mode=mode) as client:
            return await client.call_tool("held", {})

    with captured_logs() as stream, watching("held") as access:
        caller = asyncio.create_task(call())
        async with asyncio.timeout(20):
            await hold.entered.wait()
        caller.cancel()  # the client goes away: its connections close mid-response
        with pytest.raises(asyncio.CancelledError):
            await caller
        async with asyncio.timeout(20):
            await access.seen.wait()
    hold.release.set()
    lines = [line for line in json_lines(stream) if line.get("http_path") == "/mcp"]
    [left] = [line for line in lines if line.get("tool") == "held"]
    assert left["http_status"] == 499 and left["outcome"] == "cancelled"
    assert not [line for line in lines if line["http_status"] >= 500], lines
    samples = await scrape(service.base_url)
    assert samples.value("mcp_tool_calls_total", tool="held", outcome="error") == 0
    assert samples.value("mcp_tool_calls_total", tool="held", outcome="cancelled") == 1
    # Counted as the access line has it: a 499 of its own, never a 5xx.
    assert samples.value("http_requests_total", method="POST", route="/mcp", status="499") == 1
    assert not [
        labels for (name, labels) in samples if name == "http_requests_total" and ("status", "500") in labels
    ]
