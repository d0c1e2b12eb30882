"""Where a paid tools/call spends its CPU, next to the bare SDK's: in process, no sockets.

    .venv/bin/python -m bench.profile_call [--calls 3000] [--top 25] [--mode modern|legacy] [--logs off]

Drives the same `tools/call` (2026-07-28, or in a legacy SSE session) through each ASGI app
directly (an ASGI scope and a body, the way uvicorn hands them over), so the numbers are the
servers' own CPU per call with no network, no load generator and no other process in the way.
Prints microseconds per call for `bare-auth` and `paid`, then the functions with the most cumulative
time inside `paid` (cProfile). A development tool for finding the paywall's overhead; `make bench`
remains the measurement of record.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio._core._eventloop as anyio_eventloop
import sniffio

from bench import servers, wire

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
WARMUP_CALLS = 50  # made by `measure` before the calls it times


def _scope(headers: bytes, path: str = "/mcp") -> dict[str, Any]:
    """An HTTP POST scope as uvicorn builds it, from a raw header block."""
    parsed = [
        (name.strip().lower().encode(), value.strip().encode())
        for name, _, value in (line.partition(":") for line in headers.decode().split("\r\n") if line)
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8000"), *parsed],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def post(
    app: App, path: str, headers: bytes, body: bytes, answer_headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """POST `body` straight into the ASGI app: (status, response body); the response's headers
    into `answer_headers` when given."""
    sent = False
    chunks: list[bytes] = []
    status = 0
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            if answer_headers is not None:
                answer_headers.update((k.decode().lower(), v.decode()) for k, v in message["headers"])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    await app(_scope(headers, path), receive, send)
    return status, b"".join(chunks)


async def call_once(app: App, headers: bytes, body: bytes) -> bytes:
    status, payload = await post(app, "/mcp", headers, body)
    if status != 200 or b'"isError":false' not in payload.replace(b" ", b""):
        raise RuntimeError(f"unexpected answer {status}: {payload[:300]!r}")
    return payload


async def caller_headers(app: App, token: str, mode: str) -> bytes:
    """The headers of `mode`'s calls; for "legacy", of a session opened (and initialized) now."""
    if mode == "modern":
        return wire.modern_headers(token)
    answer: dict[str, str] = {}
    status, _ = await post(app, "/mcp", wire.mcp_headers(token), wire.initialize_body(), answer)
    session_id = answer.get("mcp-session-id")
    if status != 200 or session_id is None:
        raise RuntimeError(f"initialize answered {status}")
    headers = wire.mcp_headers(token, session_id=session_id, version=wire.LEGACY_VERSION)
    status, _ = await post(app, "/mcp", headers, wire.INITIALIZED_BODY)
    if status != 202:
        raise RuntimeError(f"notifications/initialized answered {status}")
    return headers


async def measure(
    app: App,
    headers: bytes,
    calls: int,
    concurrency: int,
    profiler: cProfile.Profile | None = None,
    mode: str = "modern",
) -> float:
    """CPU microseconds per call over `calls` calls, `concurrency` at a time (after a warm-up)."""

    async def worker(count: int) -> None:
        for index in range(count):
            await call_once(app, headers, wire.call_body(mode, index))

    await worker(WARMUP_CALLS)
    if profiler is not None:
        profiler.enable()
    started = time.process_time()
    await asyncio.gather(*(worker(calls // concurrency) for _ in range(concurrency)))
    spent = time.process_time() - started
    if profiler is not None:
        profiler.disable()
    return spent / calls * 1e6


async def lifespan(app: Any) -> tuple[asyncio.Task[None], asyncio.Queue[dict[str, Any]]]:
    to_app: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    started = asyncio.Event()

    async def receive() -> dict[str, Any]:
        return await to_app.get()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()
        elif message["type"] == "lifespan.startup.failed":
            raise RuntimeError(message.get("message"))

    await to_app.put({"type": "lifespan.startup"})
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.create_task(app(scope, receive, send))
    await started.wait()
    return task, to_app


class OwnProcess:
    """Sets this thread as each server's own process would have it, for servers measured in turns
    in one process: the bare SDK with no sniffio installed (as `make bench` starts it, see
    `bench/without_sniffio`) and asyncio's own tasks, ours with sniffio and asyncio declared to it
    and the loop's task factory as `serve`'s wrapper sets them (`service/process_tuning.py`). Make it
    after the servers' lifespans have started."""

    def __init__(self) -> None:
        self._declared = sniffio.thread_local.name
        self._task_factory = asyncio.get_running_loop().get_task_factory()

    def enter(self, server: str) -> None:
        ours = server.startswith("paid")
        anyio_eventloop.sniffio = sniffio if ours else None
        sniffio.thread_local.name = self._declared if ours else None
        asyncio.get_running_loop().set_task_factory(self._task_factory if ours else None)


async def paid_app(workdir: Path) -> tuple[Any, str]:
    from service.app import create_app
    from service.billing.models import StripeCustomer, Subscription
    from service.db.engine import create_engine, create_session_factory
    from service.db.metadata import utcnow
    from service.db.migrations import upgrade_to_head
    from service.identity import service as identity
    from service.identity.passwords import PasswordHashing
    from service.process_tuning import ProcessTuning
    from service.settings import Settings

    database_url = f"sqlite+aiosqlite:///{workdir / 'profile.db'}"
    upgrade_to_head(database_url)
    engine = create_engine(database_url)
    async with create_session_factory(engine)() as session, session.begin():
        user = await identity.create_user(
            session,
            "profiled",
            "profiled-password",
            PasswordHashing.from_settings(Settings(_env_file=None).password_hashing),
        )
        issued = await identity.create_personal_token(
            session, "profiled", resource="http://127.0.0.1:8000/mcp", label="profile", ttl=None
        )
        session.add(StripeCustomer(user_id=user.id, customer_id="cus_profile"))
        session.add(
            Subscription(
                id="sub_profile",
                user_id=user.id,
                customer_id="cus_profile",
                plan_id="team",  # unlimited: Pro counts its included calls
                status="active",
                current_period_end=utcnow() + timedelta(days=30),
            )
        )
    await engine.dispose()
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        environment="development",
        database_url=database_url,
        public_base_url="http://127.0.0.1:8000",
        stripe_secret_key="sk_test_profile",  # noqa: S106 - a loopback profile's fixed key
        stripe_api_base="http://127.0.0.1:9",  # never called: nothing here needs Stripe
        reconcile_interval_seconds=0,
    )
    return ProcessTuning(create_app(settings), settings.tuning), issued.secret  # as `serve` runs it


async def main(calls: int, top: int, concurrency: int, mode: str) -> None:
    os.environ.setdefault("BENCH_PORT", "8000")
    bare = servers.bare_app(with_auth=True)
    with tempfile.TemporaryDirectory() as workdir:
        paid, token = await paid_app(Path(workdir))
        bare_task, bare_q = await lifespan(bare)
        paid_task, paid_q = await lifespan(paid)
        bare_headers = await caller_headers(bare, servers.STATIC_TOKEN, mode)
        paid_headers = await caller_headers(paid, token, mode)
        own_process = OwnProcess()
        rounds = []
        for _ in range(3):
            own_process.enter("bare-auth")
            bare_us = await measure(bare, bare_headers, calls, concurrency, mode=mode)
            own_process.enter("paid")
            rounds.append((bare_us, await measure(paid, paid_headers, calls, concurrency, mode=mode)))
        profiler = cProfile.Profile()
        await measure(paid, paid_headers, calls, concurrency, profiler, mode)
        for queue in (bare_q, paid_q):
            await queue.put({"type": "lifespan.shutdown"})
        await asyncio.gather(bare_task, paid_task, return_exceptions=True)
    for index, (bare_us, paid_us) in enumerate(rounds, 1):
        print(
            f"round {index}: bare-auth {bare_us:7.1f} us/call   paid {paid_us:7.1f} us/call   "
            f"ratio {bare_us / paid_us:.2f}x"
        )
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument(
        "--mode", choices=("modern", "legacy"), default="modern", help="2026-07-28, or a legacy SSE session"
    )
    parser.add_argument(
        "--logs",
        choices=("production", "off"),
        default="production",
        help="production: JSON at INFO through the queue and its writer thread, as deployed (CPU per "
        "call includes that thread's); off: nothing logged",
    )
    arguments = parser.parse_args()
    if arguments.logs == "production":  # as `serve` sets it up; the lines go nowhere
        from service.logging_setup import configure_logging

        configure_logging("INFO", "json", open(os.devnull, "w"))  # noqa: SIM115 - for the process's life
    asyncio.run(main(arguments.calls, arguments.top, arguments.concurrency, arguments.mode))
