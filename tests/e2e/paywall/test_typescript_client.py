"""The paid-tool flow with the official TypeScript SDK client (node), paying in a real Chromium.

`tests/e2e/node/paid_client.mjs` speaks to the test in JSON lines on stdout; its dependencies are pinned by
`tests/e2e/node/package-lock.json` (`make node-deps`, or `npm ci` in that directory).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest
from playwright.async_api import Browser, expect

from service.paywall.models import Elicitation
from tests.support.browser import TIMEOUT_MS, pay_in_browser
from tests.support.service import DEFAULT_PASSWORD, RunningService

pytestmark = pytest.mark.browser

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
SCRIPT = NODE_DIR / "paid_client.mjs"
SDK = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "sdk"
CARD = "4242424242424242"
STEP_SECONDS = 30.0
COMPLETION_SECONDS = 70.0  # the script itself gives up after 60 s


class NodeClient:
    """The running script: its JSON-line events, and its stderr for failure messages."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []
        self._stderr = bytearray()
        self._stderr_reader = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        while chunk := await self.process.stderr.read(65536):
            self._stderr += chunk

    def stderr(self) -> str:
        return self._stderr.decode(errors="replace")[-4000:]

    def fail(self, why: str) -> NoReturn:
        code = self.process.returncode
        pytest.fail(f"{why}\nexit code: {code}\nevents: {self.events}\nnode stderr:\n{self.stderr()}")

    async def _line(self, within: float) -> bytes:
        assert self.process.stdout is not None
        try:
            async with asyncio.timeout(within):
                return await self.process.stdout.readline()
        except TimeoutError:
            self.fail(f"the node client printed nothing for {within} s")

    def _parse(self, line: bytes) -> dict[str, Any]:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            self.fail(f"not a JSON line on stdout: {line!r}")
        if not isinstance(event, dict):
            self.fail(f"not a JSON object on stdout: {line!r}")
        self.events.append(event)
        return event

    async def next_event(self, expected: str, within: float = STEP_SECONDS) -> dict[str, Any]:
        """The next line, which must be an `expected` event; an error line or an early exit fails the test."""
        line = await self._line(within)
        if not line:
            await self.wait(STEP_SECONDS, check=False)
            self.fail(f"the node client exited before printing a {expected!r} event")
        event = self._parse(line)
        if event.get("event") == "error":
            await self.wait(STEP_SECONDS, check=False)  # for its exit code and complete stderr
        if event.get("event") != expected:
            self.fail(f"expected a {expected!r} event, got {event}")
        return event

    async def rest(self, within: float = STEP_SECONDS) -> list[dict[str, Any]]:
        """Every remaining event until stdout closes."""
        remaining = []
        while line := await self._line(within):
            remaining.append(self._parse(line))
        return remaining

    async def wait(self, within: float = STEP_SECONDS, *, check: bool = True) -> int:
        try:
            async with asyncio.timeout(within):
                code = await self.process.wait()
                await self._stderr_reader
        except TimeoutError:
            self.fail(f"the node client did not exit within {within} s")
        if check and code != 0:
            self.fail(f"the node client exited with {code}")
        return code


@asynccontextmanager
async def node_client(service: RunningService, token: str, mode: str) -> AsyncIterator[NodeClient]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: install Node.js >= 18 (make node-deps)")
    if not SDK.is_dir():
        pytest.fail(f"{SDK} is missing: run `npm ci` in {NODE_DIR} (make node-deps)")
    process = await asyncio.create_subprocess_exec(
        node,
        str(SCRIPT),
        mode,
        cwd=NODE_DIR,
        env={**os.environ, "MCP_URL": service.mcp_url, "MCP_TOKEN": token},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    client = NodeClient(process)
    try:
        connected = await client.next_event("connected")
        assert connected["protocolVersion"] == "2025-11-25"
        assert connected["sessionId"]
        yield client
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await client._stderr_reader


async def test_typescript_client_pays_by_url_elicitation_in_chromium(
    service: RunningService, browser: Browser
) -> None:
    await service.add_user("ada")
    token = (await service.personal_token("ada")).secret
    context = await browser.new_context()
    page = await context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        async with node_client(service, token, "url") as client:
            elicitation = await client.next_event("elicitation")
            elicitation_id = elicitation["elicitationId"]
            assert elicitation["mode"] == "url"
            assert elicitation_id.startswith("el_")
            assert elicitation["url"] == f"{service.base_url}/pay/{elicitation_id}"
            assert "Pro" in elicitation["message"]

            async with asyncio.timeout(60):
                await pay_in_browser(page, elicitation["url"], "ada", DEFAULT_PASSWORD, CARD)
                await page.wait_for_url(f"{elicitation['url']}/success?session_id=cs_*")
                await expect(page.locator("#message")).to_contain_text("Stripe will confirm your payment")

            completed = await client.next_event("completed", within=COMPLETION_SECONDS)
            assert completed["elicitationId"] == elicitation_id
            result = await client.next_event("result")
            assert result["isError"] is False, result
            assert "a | " in result["text"]
            assert await client.rest() == [], "nothing after the result, no elicitation/create above all"
            await client.wait()
    finally:
        await context.close()
    [row] = await service.rows(Elicitation, id=elicitation_id)
    assert row.status == "completed"


async def test_typescript_form_only_client_gets_the_link_as_text(service: RunningService) -> None:
    await service.add_user("bea")
    token = (await service.personal_token("bea")).secret
    async with node_client(service, token, "form") as client:
        result = await client.next_event("result")
        remaining = await client.rest()
        await client.wait()
    assert result["isError"] is True, result
    assert f"{service.base_url}/pay/el_" in result["text"]
    assert [event for event in remaining if event.get("event") == "unexpected_elicitation"] == []
    assert remaining == []
