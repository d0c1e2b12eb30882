"""Browser fixtures: Debian's chromium through Playwright, a sandbox, and a tiny "shop" to land on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from tests.integration.stripe_sandbox.conftest import Env, Receiver, free_port, sandbox_env, serve

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def chromium_path() -> Path:
    """Fails (never skips) without the browser: a missing browser must not look like a pass."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (make browser)")
    return CHROMIUM


@pytest.fixture
async def browser(chromium_path: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


async def _landing(request: Request) -> HTMLResponse:
    return HTMLResponse(f"<h1>{request.url.path.strip('/')}</h1><p>{request.url.query}</p>")


@pytest.fixture
async def shop() -> AsyncIterator[str]:
    """Where success/cancel/return URLs point, so the browser really lands somewhere."""
    app = Starlette(routes=[Route("/{page}", _landing)])
    async with serve(app, free_port()) as base:
        yield base


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with sandbox_env(Receiver()) as environment:
        yield environment
