"""Browser fixtures shared by every end-to-end test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS


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
