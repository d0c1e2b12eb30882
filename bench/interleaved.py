"""Throughput of several servers measured in turns of half a second, from one generator process.

A cloud vCPU does not run at one speed. On the 2-core AMD EPYC machine of 2026-11-30 afternoon the
same Python loop took 34 ms or 18 ms per run, switching between the two every one to three seconds
(a busy hyperthread sibling, most likely). Windows of a few seconds per server, one server after
another, then compare servers that ran at different speeds: per-round ratios of identical servers
spread from 0.6x to 1.3x. Here every server gets a short slice in turn, the order rotated by one
place per cycle (bare, bare-auth, paid; bare-auth, paid, bare; paid, bare, bare-auth), many times
over, so the servers compared within a cycle ran at nearly the same speed, and the ratio reported
is the median over cycles. (Until 2026-12-01 the order was reversed every other cycle, so bare
and paid each followed themselves every other cycle and bare-auth never did.)

Each target keeps `concurrency` open connections (a legacy session each) for the whole run. In a
slice all of them call as fast as answers come back. Calls that finish inside the slice count,
from the moment every connection has had its first answer (or from the slice's second half,
whichever comes first). When the slice ends the workers stop sending and wait for the calls in
flight, uncounted, so the next server's slice starts on a quiet machine. Slices are `slice`
seconds, longer above 32 connections (1 s at 64 by default); at c=1 there are four times the
cycles at half the slice (`cycle_count`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from bench import wire
from bench.loadgen import EXPECT_MARKERS, percentile, process_cpu_seconds

SETUP_TIMEOUT = 120.0
DRAIN_TIMEOUT = 30.0


LONE_CALLER_CYCLES = 4


def slice_seconds(slice_: float, concurrency: int) -> float:
    """Long enough at high concurrency that a slice is mostly steady state, not ramp-up; at c=1,
    half as long, so the servers compared in a cycle ran closer together in time."""
    if concurrency == 1:
        return slice_ / 2
    return slice_ * max(1.0, concurrency / 32)


def cycle_count(cycles: int, concurrency: int) -> int:
    """At c=1 a server's rate is one call's latency, which a change of machine speed moves in
    full, and the paywall's share of a call is largest: four times the cycles (at half the slice,
    twice the time). Measured with three identical bare servers, the medians of 20 cycles x 0.5 s
    read 0.95x-1.12x of each other from run to run; of 84 x 0.25 s, 0.995x-1.035x."""
    return cycles * LONE_CALLER_CYCLES if concurrency == 1 else cycles


@dataclass
class Target:
    name: str
    port: int
    token: str | None
    server_pid: int
    marker: bytes  # what a correct answer contains (per target: an unpaid call is compared to a paid one)
    connections: list[tuple[wire.Connection, bytes]] = field(default_factory=list)
    request_id: int = 1
    rates: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None

    def error(self, text: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = text[:300]


def turn_order(targets: list[Target], cycle: int) -> list[Target]:
    """The targets rotated by one place per cycle: over any len(targets) cycles in a row each takes
    each place once, none ever follows itself (its caches warm from its own last slice), and for
    every pair the slices between them add up to zero either way, so steady drift cancels."""
    shift = cycle % len(targets)
    return targets[shift:] + targets[:shift]


async def _connect(target: Target, mode: str, concurrency: int) -> None:
    async with asyncio.timeout(SETUP_TIMEOUT):
        target.connections = list(
            await asyncio.gather(
                *(wire.open_caller(target.port, target.token, mode) for _ in range(concurrency))
            )
        )


async def _slice(target: Target, mode: str, seconds: float, measured: bool) -> None:
    """All of `target`'s connections call until `seconds` pass; then the calls in flight finish.

    Counting starts once every connection has had its first answer (or half-way, if one has not):
    before that the server is filling up from idle, which at c=64 takes a few of its latencies.
    """
    start = time.perf_counter()
    end = start + seconds
    first_answers: list[float] = []
    answers: list[tuple[float, float]] = []  # (finished, latency) of correct answers
    server_cpu_start = process_cpu_seconds(target.server_pid)

    async def worker(index: int) -> None:
        conn, headers = target.connections[index]
        answered = False
        while time.perf_counter() < end:
            target.request_id += 1
            body = wire.call_body(mode, target.request_id)
            sent = time.perf_counter()
            try:
                response = await conn.request("POST", "/mcp", headers, body)
            except (OSError, wire.WireError, asyncio.IncompleteReadError, ValueError) as exc:
                target.error(f"request: {exc!r}")
                conn.close()
                conn, headers = target.connections[index] = await wire.open_caller(
                    target.port, target.token, mode
                )
                continue
            finished = time.perf_counter()
            correct = response.status == 200 and target.marker in response.body
            if not correct and measured:
                target.error(f"{response.status} {response.body[:300]!r}")
            if not answered:
                answered = True
                first_answers.append(finished)
            elif correct:
                answers.append((finished, finished - sent))

    async with asyncio.timeout(seconds + DRAIN_TIMEOUT):
        await asyncio.gather(*(worker(index) for index in range(len(target.connections))))
    if not measured:
        return
    spent = time.perf_counter() - start
    filled = max(first_answers) if len(first_answers) == len(target.connections) else end
    window_start = min(filled, start + seconds / 2)
    counted = [latency for finished, latency in answers if window_start <= finished <= end]
    target.rates.append(len(counted) / (end - window_start))
    target.latencies.extend(counted)
    # The server's CPU over the whole slice, drain included.
    target.server_cpu.append((process_cpu_seconds(target.server_pid) - server_cpu_start) / spent)


async def run_interleaved(spec: dict[str, Any]) -> dict[str, Any]:
    mode, concurrency = spec["mode"], int(spec["concurrency"])
    expect = spec.get("expect", "result")
    targets = [
        Target(
            item["name"],
            int(item["port"]),
            item.get("token"),
            int(item.get("server_pid", 0)),
            EXPECT_MARKERS[item.get("expect", expect)],
        )
        for item in spec["targets"]
    ]
    for target in targets:
        await _connect(target, mode, concurrency)
    for target in targets:
        await _slice(target, mode, float(spec["warmup"]), measured=False)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    seconds = slice_seconds(float(spec["slice"]), concurrency)
    for cycle in range(cycle_count(int(spec["cycles"]), concurrency)):
        for target in turn_order(targets, cycle):
            await _slice(target, mode, seconds, measured=True)
    generator_cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    for target in targets:
        for conn, _ in target.connections:
            conn.close()
    results: dict[str, Any] = {}
    for target in targets:
        latencies = sorted(target.latencies)
        p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
        results[target.name] = {
            "rates": target.rates,
            "server_cpu": target.server_cpu,
            "count": len(latencies),
            "p50_ms": p50 * 1000 if p50 is not None else None,
            "p99_ms": p99 * 1000 if p99 is not None else None,
            "errors": target.errors,
            "first_error": target.first_error,
        }
    return {"targets": results, "generator_cpu": generator_cpu}
