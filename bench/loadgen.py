"""The load generator, run as its own process: `python -m bench.loadgen '<json spec>'`.

Prints one JSON line with the measured window's counts, latencies, its own CPU time and the
server process's CPU time (read from /proc). Every loop ends at the spec's deadline.

Kinds:
- `calls`: tools/call in `legacy` (one session per connection) or `modern` (2026-07-28) mode;
  `expect` says what a correct answer contains (a result, -32042, an InputRequiredResult).
- `interleaved`: the same calls to several servers in turns of short slices (`bench/interleaved.py`),
  for throughput ratios that hold on a machine whose speed changes from second to second.
- `webhooks`: signed `customer.subscription.updated` events to /webhooks/stripe.
- `gets`: GET `path` (e.g. /readyz), expecting 200.
- `login-flood`: wrong-password `POST /login`s by `concurrency` workers, each from a fresh
  `X-Forwarded-For` address and username (a botnet spraying guesses: no throttle engages, every
  one costs a hash), until stdin closes; prints the answers' status counts (`bench/login_flood.py`).
- `soak`: `clients` loops of legacy initialize -> unpaid tools/call (-32042) -> DELETE, each on
  its own connection, for `duration` seconds; prints the rounds done.
- `idle`: opens `sessions` legacy sessions with their GET streams, prints a ready line, then holds
  them until stdin closes or `hold_seconds` pass.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from bench import wire

EXPECT_MARKERS = {
    "result": b'"isError":false',
    "url_elicitation": b"-32042",
    "input_required": b'"input_required"',
    "webhook": b'"applied"',
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SETUP_TIMEOUT = 60.0


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` from /proc (all its threads)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class Window:
    """The measured interval; workers connect first, then all start together (`go`)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.start = self.end = time.perf_counter() + SETUP_TIMEOUT
        self.latencies: list[float] = []
        self.errors = 0
        self.first_error: str | None = None
        self.connected = 0
        self.go = asyncio.Event()
        self.all_connected = asyncio.Event()

    def begin(self) -> None:
        self.start = time.perf_counter() + float(self.spec["warmup"])
        self.end = self.start + float(self.spec["duration"])
        self.go.set()

    async def connected_one(self) -> None:
        if not self.go.is_set():
            self.connected += 1
            if self.connected >= int(self.spec["concurrency"]):
                self.all_connected.set()
            await self.go.wait()

    def error(self, text: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = text[:300]


async def _timed_post(
    conn: wire.Connection, window: Window, path: str, headers: bytes, body: bytes, marker: bytes
) -> bool:
    """One POST, recorded if it fell inside the window; False when the connection broke."""
    started = time.perf_counter()
    try:
        response = await conn.request("POST", path, headers, body)
    except (OSError, wire.WireError, asyncio.IncompleteReadError, ValueError) as exc:
        window.error(f"request: {exc!r}")
        return False
    finished = time.perf_counter()
    if started >= window.start and finished <= window.end:
        if response.status == 200 and marker in response.body:
            window.latencies.append(finished - started)
        else:
            window.error(f"{response.status} {response.body[:300]!r}")
    return True


async def _call_worker(spec: dict[str, Any], window: Window, index: int) -> None:
    port, token, mode = spec["port"], spec.get("token"), spec["mode"]
    marker = EXPECT_MARKERS[spec.get("expect", "result")]
    tool = spec.get("tool")  # another tool than the chart, modern mode only
    request_id = 1
    conn: wire.Connection | None = None
    headers = b""
    while time.perf_counter() < window.end:
        if conn is None:
            try:
                conn, headers = await wire.open_caller(port, token, mode)
            except (OSError, wire.WireError, TimeoutError) as exc:
                window.error(f"connect: {exc!r}")
                await asyncio.sleep(0.05)
                continue
            if tool is not None:
                headers = wire.modern_headers(token, tool)
            await window.connected_one()
        request_id += 1
        if tool is not None:
            body = wire.modern_call_body(request_id, tool, spec["arguments"])
        else:
            body = wire.call_body(mode, request_id)
        if not await _timed_post(conn, window, "/mcp", headers, body, marker):
            conn.close()
            conn = None
    if conn is not None:
        conn.close()


def _webhook_body(spec: dict[str, Any], index: int, sequence: int) -> bytes:
    customers = spec["customers"]
    customer = customers[(index + sequence * spec["concurrency"]) % len(customers)]
    now = int(time.time())
    subscription = {
        "id": customer["subscription_id"],
        "object": "subscription",
        "customer": customer["customer_id"],
        "status": "active",
        "cancel_at_period_end": False,
        "items": {
            "object": "list",
            "data": [
                {
                    "id": f"si_{customer['subscription_id']}",
                    "object": "subscription_item",
                    "current_period_end": now + 30 * 86400,
                    "price": {"id": "price_bench", "object": "price", "lookup_key": spec["lookup_key"]},
                }
            ],
        },
        "metadata": {"user_id": customer["user_id"]},
    }
    event = {
        "id": f"evt_bench_{spec['tag']}_{index}_{sequence}",
        "object": "event",
        "api_version": spec["api_version"],
        "created": now,
        "livemode": False,
        "type": "customer.subscription.updated",
        "data": {"object": subscription},
    }
    return json.dumps(event, separators=(",", ":")).encode()


async def _webhook_worker(spec: dict[str, Any], window: Window, index: int) -> None:
    from stripe_sandbox import sign_webhook_payload

    conn: wire.Connection | None = None
    sequence = 0
    marker = EXPECT_MARKERS["webhook"]
    while time.perf_counter() < window.end:
        if conn is None:
            conn = wire.Connection(spec["port"])
            try:
                await conn.open()
            except (OSError, TimeoutError) as exc:
                window.error(f"connect: {exc!r}")
                conn = None
                await asyncio.sleep(0.05)
                continue
            await window.connected_one()
        sequence += 1
        body = _webhook_body(spec, index, sequence)
        signature = sign_webhook_payload(body, spec["secret"], int(time.time()))
        headers = wire.header_block({"Content-Type": "application/json", "Stripe-Signature": signature})
        if not await _timed_post(conn, window, "/webhooks/stripe", headers, body, marker):
            conn.close()
            conn = None
    if conn is not None:
        conn.close()


async def _get_worker(spec: dict[str, Any], window: Window, index: int) -> None:
    conn: wire.Connection | None = None
    while time.perf_counter() < window.end:
        if conn is None:
            conn = wire.Connection(spec["port"])
            try:
                await conn.open()
            except (OSError, TimeoutError) as exc:
                window.error(f"connect: {exc!r}")
                conn = None
                await asyncio.sleep(0.05)
                continue
            await window.connected_one()
        started = time.perf_counter()
        try:
            response = await conn.request("GET", spec["path"], b"")
        except (OSError, wire.WireError, asyncio.IncompleteReadError, ValueError) as exc:
            window.error(f"request: {exc!r}")
            conn.close()
            conn = None
            continue
        finished = time.perf_counter()
        if started >= window.start and finished <= window.end:
            if response.status == 200:
                window.latencies.append(finished - started)
            else:
                window.error(f"{response.status} {response.body[:300]!r}")
    if conn is not None:
        conn.close()


WORKERS = {"webhooks": _webhook_worker, "gets": _get_worker}


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, round(fraction * (len(sorted_values) - 1)))
    return sorted_values[index]


async def run_load(spec: dict[str, Any]) -> dict[str, Any]:
    window = Window(spec)
    worker = WORKERS.get(spec["kind"], _call_worker)
    server_pid = int(spec.get("server_pid", 0))
    concurrency = int(spec["concurrency"])
    tasks = [asyncio.create_task(worker(spec, window, index)) for index in range(concurrency)]
    try:
        async with asyncio.timeout(SETUP_TIMEOUT):
            await window.all_connected.wait()
    except TimeoutError:
        window.error(f"only {window.connected} of {concurrency} workers connected")
    window.begin()
    # CPU counters at the window's edges: sleep until the window opens, read, sleep until it closes.
    await asyncio.sleep(max(0.0, window.start - time.perf_counter()))
    cpu0, server0, wall0 = time.process_time(), process_cpu_seconds(server_pid), time.perf_counter()
    await asyncio.sleep(max(0.0, window.end - time.perf_counter()))
    cpu1, server1, wall1 = time.process_time(), process_cpu_seconds(server_pid), time.perf_counter()
    async with asyncio.timeout(30):
        await asyncio.gather(*tasks)
    latencies = sorted(window.latencies)
    elapsed = wall1 - wall0
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    return {
        "count": len(latencies),
        "errors": window.errors,
        "first_error": window.first_error,
        "rps": len(latencies) / float(spec["duration"]),
        "p50_ms": p50 * 1000 if p50 is not None else None,
        "p99_ms": p99 * 1000 if p99 is not None else None,
        "generator_cpu": (cpu1 - cpu0) / elapsed,
        "server_cpu": (server1 - server0) / elapsed if server_pid else None,
    }


async def hold_idle(spec: dict[str, Any]) -> None:
    """Opens idle legacy sessions with GET streams, reports, and holds them until told to stop."""
    port, token, count = spec["port"], spec.get("token"), int(spec["sessions"])
    deadline = time.monotonic() + float(spec["hold_seconds"])
    connections: list[wire.Connection] = []
    session_ids: list[str] = []
    semaphore = asyncio.Semaphore(16)

    async def open_one() -> None:
        async with semaphore:
            control, stream = wire.Connection(port), wire.Connection(port)
            await control.open()
            try:
                session_id = await wire.open_legacy_session(control, token)
            finally:
                control.close()
            session_ids.append(session_id)
            await stream.open()
            await wire.open_get_stream(stream, token, session_id)
            connections.append(stream)

    async with asyncio.timeout(float(spec.get("open_timeout", 120))):
        results = await asyncio.gather(*(open_one() for _ in range(count)), return_exceptions=True)
    failures = [repr(result) for result in results if isinstance(result, BaseException)]
    print(json.dumps({"opened": len(connections), "failed": len(failures), "first_error": failures[:1]}))
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    stdin_closed = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), stdin_closed.set)
    try:
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            await stdin_closed.wait()
    except TimeoutError:
        pass
    for conn in connections:
        conn.close()
    # End the sessions too (DELETE), so later measurements do not run next to 1,000 orphans.
    control = wire.Connection(port)
    try:
        async with asyncio.timeout(60):
            await control.open()
            for session_id in session_ids:
                headers = wire.mcp_headers(token, session_id=session_id, version=wire.LEGACY_VERSION)
                await control.request("DELETE", "/mcp", headers)
    except (OSError, TimeoutError, wire.WireError):
        pass
    finally:
        control.close()


async def soak(spec: dict[str, Any]) -> dict[str, Any]:
    """Unpaid rounds, each in a session of its own that is deleted after its call."""
    port, token = spec["port"], spec.get("token")
    deadline = time.monotonic() + float(spec["duration"])
    marker = EXPECT_MARKERS["url_elicitation"]
    rounds, errors = 0, 0
    first_error: str | None = None

    async def client() -> None:
        nonlocal rounds, errors, first_error
        conn: wire.Connection | None = None
        while time.monotonic() < deadline:
            try:
                if conn is None:
                    conn = wire.Connection(port)
                    await conn.open()
                session_id = await wire.open_legacy_session(conn, token)
                headers = wire.mcp_headers(token, session_id=session_id, version=wire.LEGACY_VERSION)
                answer = await conn.request("POST", "/mcp", headers, wire.legacy_call_body(2))
                ended = await conn.request("DELETE", "/mcp", headers)
                if marker not in answer.body or ended.status != 200:
                    raise wire.WireError(f"call {answer.status} {answer.body[:200]!r}, DELETE {ended.status}")
                rounds += 1
            except (OSError, TimeoutError, wire.WireError, asyncio.IncompleteReadError, ValueError) as exc:
                errors += 1
                first_error = first_error or repr(exc)[:300]
                if conn is not None:
                    conn.close()
                conn = None
                await asyncio.sleep(0.05)
        if conn is not None:
            conn.close()

    await asyncio.gather(*(client() for _ in range(int(spec["clients"]))))
    return {"rounds": rounds, "errors": errors, "first_error": first_error}


def main() -> None:
    spec = json.loads(sys.argv[1])
    import uvloop  # uvicorn[standard] brings it; the servers run on it too

    if spec["kind"] == "idle":
        uvloop.run(hold_idle(spec))
        return
    if spec["kind"] == "login-flood":
        from bench.login_flood import flood

        print(json.dumps(uvloop.run(flood(spec))))
    if spec["kind"] == "soak":
        print(json.dumps(uvloop.run(soak(spec))))
        return
    if spec["kind"] == "interleaved":
        from bench.interleaved import run_interleaved

        print(json.dumps(uvloop.run(run_interleaved(spec))))
        return
    print(json.dumps(uvloop.run(run_load(spec))))


if __name__ == "__main__":
    main()
