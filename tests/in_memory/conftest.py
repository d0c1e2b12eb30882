"""The in-memory tier: the service's MCP server through the SDK's `Client(server)`, no HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.in_memory import InMemoryService, run_in_memory


@pytest.fixture
async def memory(database_url: str) -> AsyncIterator[InMemoryService]:
    async with run_in_memory(database_url) as running:
        yield running
