"""The login-flood scenario: latency of /readyz, a free tool call and a webhook, with and without a
concurrent flood of wrong-password sign-ins.

The flood is a botnet's: every `POST /login` comes from a fresh address (`X-Forwarded-For`, the
server trusting loopback as its proxy) and names a fresh username, so no lockout engages and each
one asks for an argon2 check; what protects the service is the bounded hashing queue. The servers
run as in production: JSON logs at INFO, /metrics on, argon2-cffi's default cost.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import subprocess
import sys
import time
from collections import Counter
from ipaddress import IPv4Address
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from bench import procs, wire
from bench.loadgen import percentile
from bench.report import Row, fmt, summarize

if TYPE_CHECKING:
    from bench.cli import Bench

FLOOD_CONCURRENCY = 200
PROBE_CONCURRENCY = 2
# The probes start this long after the flood: its first wave reaches the endpoint before hashing
# is saturated, and that ramp-up is reported by the flood's own row, not mixed into the probes'.
FLOOD_SETTLE_SECONDS = 5.0
FLOOD_HOLD_SECONDS = 600.0  # the flood's own bound, should the bench never close its stdin
TARGETS = (("SQLite", "paid-flood"), ("PostgreSQL", "paid-flood-pg"))
# What the flood's servers run with, beyond the bench's usual paid settings.
PRODUCTION_LIKE = {
    "log_level": "INFO",
    "log_format": "json",
    "metrics_enabled": True,
    "trusted_proxies": ["127.0.0.1"],
}
TEXT = "the quick brown fox jumps over the lazy dog " * 4
CSRF_FIELD = re.compile(rb'name="csrf_token" value="([^"]+)"')


async def flood(spec: dict[str, Any]) -> dict[str, Any]:
    """Wrong-password sign-ins until stdin closes; the answers' statuses and latencies."""
    port, concurrency = int(spec["port"]), int(spec["concurrency"])
    page_conn = wire.Connection(port)
    await page_conn.open()
    try:
        page = await page_conn.request("GET", "/login", b"")
    finally:
        page_conn.close()
    cookie = page.headers["set-cookie"].split(";", 1)[0]
    found = CSRF_FIELD.search(page.body)
    if found is None:
        raise RuntimeError("the login page has no CSRF field")
    csrf_token = found.group(1).decode()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_reader(sys.stdin.fileno(), stop.set)
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    missing_retry_after = 0
    errors: list[str] = []

    async def worker(index: int) -> None:
        nonlocal missing_retry_after
        conn: wire.Connection | None = None
        sequence = 0
        while not stop.is_set():
            if conn is None:
                conn = wire.Connection(port)
                try:
                    await conn.open()
                except (OSError, TimeoutError) as exc:
                    errors.append(repr(exc))
                    conn = None
                    await asyncio.sleep(0.05)
                    continue
            sequence += 1
            body = urlencode(
                {
                    "username": f"guess-{index}-{sequence}",
                    "password": "a wrong guess",
                    "csrf_token": csrf_token,
                    "next": "/account",
                }
            ).encode()
            headers = wire.header_block(
                {
                    "Content-Type": "application/x-www-form-urlencoded",
                    "Cookie": cookie,
                    "X-Forwarded-For": str(IPv4Address(random.getrandbits(32))),
                }
            )
            started = time.perf_counter()
            try:
                response = await conn.request("POST", "/login", headers, body)
            except (OSError, wire.WireError, asyncio.IncompleteReadError, ValueError) as exc:
                errors.append(repr(exc))
                conn.close()
                conn = None
                continue
            latencies.append(time.perf_counter() - started)
            statuses[response.status] += 1
            if response.status in (429, 503) and "retry-after" not in response.headers:
                missing_retry_after += 1
        if conn is not None:
            conn.close()

    started = time.perf_counter()
    tasks = [asyncio.create_task(worker(index)) for index in range(concurrency)]
    try:
        async with asyncio.timeout(float(spec.get("hold_seconds", FLOOD_HOLD_SECONDS))):
            await stop.wait()
    except TimeoutError:
        stop.set()
    async with asyncio.timeout(60):
        await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    p50, p99 = percentile(ordered, 0.5), percentile(ordered, 0.99)
    return {
        "count": len(ordered),
        "per_second": len(ordered) / elapsed,
        "statuses": {str(status): count for status, count in sorted(statuses.items())},
        "missing_retry_after": missing_retry_after,
        "p50_ms": p50 * 1000 if p50 is not None else None,
        "p99_ms": p99 * 1000 if p99 is not None else None,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def _start_flood(port: int) -> subprocess.Popen[str]:
    spec = {"kind": "login-flood", "port": port, "concurrency": FLOOD_CONCURRENCY}
    return procs.spawn(
        [sys.executable, "-m", "bench.loadgen", json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop_flood(process: subprocess.Popen[str]) -> dict[str, Any]:
    try:
        out, err = process.communicate(input="", timeout=120)  # closing stdin ends the flood
    finally:
        procs.forget(process)
    if process.returncode != 0:
        raise RuntimeError(f"login flood failed ({process.returncode}): {err[-2000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def measure(bench: Bench) -> None:
    from service.settings import DEV_WEBHOOK_SECRET
    from stripe_sandbox import API_VERSION

    for backend, name in TARGETS:
        if name not in bench.targets:
            continue
        target = bench.targets[name]
        assert target.seeded is not None
        customers = [account.as_customer() for account in target.seeded.webhook_customers]
        probes: list[tuple[str, dict[str, Any]]] = [
            ("GET /readyz", {"kind": "gets", "path": "/readyz"}),
            (
                "tools/call text_stats (free)",
                {"kind": "calls", "mode": "modern", "tool": "text_stats", "arguments": {"text": TEXT}},
            ),
            (
                "webhook delivery",
                {
                    "kind": "webhooks",
                    "customers": customers,
                    "secret": DEV_WEBHOOK_SECRET,
                    "api_version": API_VERSION,
                    "lookup_key": "paid_mcp_pro_monthly",
                },
            ),
        ]
        for flooded in (False, True):
            process = _start_flood(target.server.port) if flooded else None
            if process is not None:
                time.sleep(FLOOD_SETTLE_SECONDS)
            try:
                for label, spec in probes:
                    runs = [
                        bench.load(
                            name, concurrency=PROBE_CONCURRENCY, tag=f"flood{time.monotonic_ns()}", **spec
                        )
                        for _ in range(bench.options.rounds)
                    ]
                    summary = summarize(runs)
                    during = f"during a login flood ({FLOOD_CONCURRENCY} workers)" if flooded else "no flood"
                    print(
                        f"  {label} {backend} {during}: p50 {fmt(summary['p50_ms'], 2)} ms, "
                        f"p99 {fmt(summary['p99_ms'], 2)} ms",
                        flush=True,
                    )
                    bench.report.rows.append(
                        Row(
                            scenario=f"{label} c={PROBE_CONCURRENCY}, {during}",
                            server=f"paid ({backend})",
                            metric="requests/s",
                            value=fmt(summary["rps"], 0),
                            p50=fmt(summary["p50_ms"], 2),
                            p99=fmt(summary["p99_ms"], 2),
                            generator_cpu=fmt(summary["generator_cpu"], 2),
                            server_cpu=fmt(summary["server_cpu"], 2),
                            note="production-like: JSON logs at INFO, /metrics on, argon2 defaults"
                            + (f"; from {FLOOD_SETTLE_SECONDS:g} s into the flood" if flooded else "")
                            + (f"; {summary['errors']} errors" if summary["errors"] else ""),
                        )
                    )
            finally:
                stats = _stop_flood(process) if process is not None else None
            if stats is not None:
                print(f"  login flood {backend}: {stats}", flush=True)
                bench.report.rows.append(
                    Row(
                        scenario=f"wrong-password POST /login, {FLOOD_CONCURRENCY} workers (the flood)",
                        server=f"paid ({backend})",
                        metric="answers/s",
                        value=fmt(stats["per_second"], 0),
                        p50=fmt(stats["p50_ms"], 2),
                        p99=fmt(stats["p99_ms"], 2),
                        generator_cpu="",
                        server_cpu="",
                        note=f"statuses {stats['statuses']}, 429/503 without Retry-After: "
                        f"{stats['missing_retry_after']}, connection errors: {stats['errors']}",
                    )
                )
