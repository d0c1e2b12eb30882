"""Sync tools' worker threads: one user holds at most their share of them, so another user's call
still finds a thread while the first user's calls fill theirs."""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio
import anyio.to_thread
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from service.tool_threads import ToolThreads


class Calls:
    """Sync calls that wait until the test lets each go, and a way to wait for them to start."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self._start = threading.Semaphore(0)
        self._gates: dict[str, threading.Event] = {}

    def blocking(self, name: str) -> Callable[[], str]:
        gate = self._gates[name] = threading.Event()

        def run() -> str:
            self.started.append(name)
            self._start.release()
            gate.wait(30)
            return name

        return run

    async def wait_for_starts(self, count: int) -> None:
        for _ in range(count):
            await anyio.to_thread.run_sync(self._start.acquire)

    def let_go(self, name: str) -> None:
        self._gates[name].set()

    def let_all_go(self) -> None:
        for gate in self._gates.values():
            gate.set()


async def call_as(threads: ToolThreads, user: str, function: Callable[[], str], done: list[str]) -> None:
    token = AccessToken(token=f"t-{user}", client_id="pat", scopes=[], subject=user)
    auth_context_var.set(AuthenticatedUser(token))  # as the SDK's auth middleware sets it
    done.append(await threads.run_sync(function))


async def test_one_user_holds_at_most_their_share_and_others_still_run() -> None:
    threads = ToolThreads(3, per_user=2)
    calls = Calls()
    done: list[str] = []
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                for name in ("ada-1", "ada-2", "ada-3"):
                    group.start_soon(call_as, threads, "ada", calls.blocking(name), done)
                await calls.wait_for_starts(2)
                # The third thread is free; ada's third call waits for one of her own to end.
                group.start_soon(call_as, threads, "bob", calls.blocking("bob-1"), done)
                await calls.wait_for_starts(1)
                assert sorted(calls.started) == ["ada-1", "ada-2", "bob-1"]
                first = calls.started[0]
                calls.let_go(first)
                await calls.wait_for_starts(1)
                assert calls.started[-1] == "ada-3", "ada's waiting call took her freed place"
                calls.let_all_go()
    finally:
        calls.let_all_go()
    assert sorted(done) == ["ada-1", "ada-2", "ada-3", "bob-1"]


async def test_calls_without_a_user_share_the_whole_pool() -> None:
    threads = ToolThreads(2, per_user=1)
    calls = Calls()
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                for name in ("a", "b"):
                    group.start_soon(threads.run_sync, calls.blocking(name))
                await calls.wait_for_starts(2)
                calls.let_all_go()
    finally:
        calls.let_all_go()
    assert sorted(calls.started) == ["a", "b"]
