"""The service's MCP server in memory: the SDK's `Client(server)`, with the caller chosen by the test.

The app is built and its lifespan run exactly as `serve` does, but nothing listens for HTTP: tools
and the paywall learn who calls them from `ChosenCallers` instead of a verified bearer token, so a
paid tool is one function call away. What HTTP adds (bearer checks, sessions, the payment pages)
stays covered by the integration tier.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from mcp import Client

from service.app import create_app
from service.identity.models import User
from service.mcp_server.caller import Caller, NoAuthenticatedCaller
from tests.support.service import RunningService, make_settings

TEST_CLIENT_ID = "in-memory-test-client"
# Payment links name this address; in memory nothing listens on it and nothing dials it.
UNSERVED_PORT = 9


class ChosenCallers:
    """A caller source whose caller the test sets around each client it opens."""

    def __init__(self) -> None:
        self._current: ContextVar[Caller | None] = ContextVar("in_memory_caller", default=None)

    def __call__(self) -> Caller:
        caller = self._current.get()
        if caller is None:
            raise NoAuthenticatedCaller("no caller set for this in-memory client")
        return caller

    @contextmanager
    def acting_as(self, caller: Caller) -> Iterator[None]:
        """The server tasks a client starts inside this block run for `caller` (they copy the context)."""
        token = self._current.set(caller)
        try:
            yield
        finally:
            self._current.reset(token)


@dataclass
class InMemoryService(RunningService):
    """A `RunningService` without HTTP: its database, Stripe sandbox and MCP server are real."""

    callers: ChosenCallers

    @asynccontextmanager
    async def client(self, user: User, **kwargs: Any) -> AsyncIterator[Client]:
        """An SDK client connected in memory to the service's MCP server, calling as `user`."""
        with self.callers.acting_as(Caller(user_id=user.id, client_id=TEST_CLIENT_ID)):
            async with Client(self.runtime.mcp, **kwargs) as client:
                yield client


@asynccontextmanager
async def lifespan_running(app: FastAPI) -> AsyncIterator[None]:
    """The app's lifespan, entered and left in a task of its own as uvicorn runs it: its task
    groups must be left by the task that entered them, and a fixture's teardown is another task."""
    started = asyncio.Event()
    stop = asyncio.Event()

    async def hold() -> None:
        async with app.router.lifespan_context(app):
            started.set()
            await stop.wait()

    task = asyncio.create_task(hold())
    waiting = asyncio.create_task(started.wait())
    await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED)
    if not started.is_set():
        waiting.cancel()
        await task  # raises what failed the startup
        raise RuntimeError("the lifespan ended during startup")
    try:
        yield
    finally:
        stop.set()
        await task


@asynccontextmanager
async def run_in_memory(database_url: str, **overrides: Any) -> AsyncIterator[InMemoryService]:
    settings = make_settings(database_url, UNSERVED_PORT, **overrides)
    callers = ChosenCallers()
    app = create_app(settings, callers=callers)
    async with lifespan_running(app):
        yield InMemoryService(
            base_url=settings.http.public_base_url, settings=settings, app=app, callers=callers
        )
