"""Browser fixtures: Debian's chromium through Playwright, a sandbox, and a tiny "shop" to land on."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from tests.integration.stripe_sandbox.conftest import Env, Receiver, sandbox_env
from tests.support.servers import bound_socket, serve


async def _landing(request: Request) -> HTMLResponse:
    return HTMLResponse(f"<h1>{request.url.path.strip('/')}</h1><p>{request.url.query}</p>")


@pytest.fixture
async def shop() -> AsyncIterator[str]:
    """Where success/cancel/return URLs point, so the browser really lands somewhere."""
    app = Starlette(routes=[Route("/{page}", _landing)])
    async with serve(app, bound_socket()) as base:
        yield base


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with sandbox_env(Receiver()) as environment:
        yield environment
