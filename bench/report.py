"""Medians over rounds, and the markdown document with the machine, the command and one results table."""

from __future__ import annotations

import os
import platform
import random
import statistics
from dataclasses import dataclass, field
from typing import Any


def machine() -> dict[str, str]:
    model = "unknown"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = "unknown"
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "memory": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def median(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}{suffix}"


@dataclass
class Row:
    scenario: str
    server: str
    metric: str
    value: str
    p50: str = ""
    p99: str = ""
    ratio: str = ""
    ratio_auth: str = ""
    generator_cpu: str = ""
    server_cpu: str = ""
    note: str = ""


@dataclass
class Report:
    command: str
    settings: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self, info: dict[str, str], started: str, elapsed: float) -> str:
        lines = [
            "# Benchmark results",
            "",
            f"- Machine: {info['nproc']} CPUs, {info['cpu']}, {info['memory']} RAM, {info['os']}, "
            f"Python {info['python']}",
            f"- Command: `{self.command}`",
            f"- Run: {started}, {elapsed:.0f} s; {self.settings}",
            "- Servers and the load generator share the machine (loopback only); generator and server CPU "
            "are in cores (1.00 = one core busy) over the measured window, medians over rounds.",
            "- Ratios are medians of per-round ratios (per-cycle for tools/call, whose servers take turns "
            "in short slices) against the bare `mcp` `MCPServer` in the same mode (`vs bare`) and "
            "against the bare server with a static-token verifier (`vs bare+auth`).",
            "",
            "| Scenario | Server | Metric | Value | p50 ms | p99 ms | vs bare | vs bare+auth "
            "| gen CPU | server CPU | Note |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for row in self.rows:
            lines.append(
                f"| {row.scenario} | {row.server} | {row.metric} | {row.value} | {row.p50} | {row.p99} "
                f"| {row.ratio} | {row.ratio_auth} | {row.generator_cpu} | {row.server_cpu} | {row.note} |"
            )
        if self.notes:
            lines += ["", *[f"- {note}" for note in self.notes]]
        return "\n".join(lines) + "\n"


def summarize(results: list[dict[str, Any]]) -> dict[str, float | None]:
    return {
        "rps": median([result["rps"] for result in results]),
        "p50_ms": median([result["p50_ms"] for result in results]),
        "p99_ms": median([result["p99_ms"] for result in results]),
        "generator_cpu": median([result["generator_cpu"] for result in results]),
        "server_cpu": median([result["server_cpu"] for result in results]),
        "errors": sum(result["errors"] for result in results),
    }


def round_ratios(numerators: list[dict[str, Any]], denominators: list[dict[str, Any]]) -> list[float]:
    """Per-round throughput ratios, rounds paired by index."""
    return [
        a["rps"] / b["rps"] for a, b in zip(numerators, denominators, strict=False) if a["rps"] and b["rps"]
    ]


def ratio_of(numerators: list[dict[str, Any]], denominators: list[dict[str, Any]]) -> float | None:
    """Median of per-round throughput ratios."""
    pairs = round_ratios(numerators, denominators)
    return statistics.median(pairs) if pairs else None


def ratio_spread(numerators: list[dict[str, Any]], denominators: list[dict[str, Any]]) -> str:
    """The per-round ratios behind `ratio_of`, lowest to highest: how much the machine moved.
    Past 30 of them, the lowest, the deciles and the highest (`min d1..d9 max`)."""
    pairs = sorted(round_ratios(numerators, denominators))
    if len(pairs) > 30:
        deciles = statistics.quantiles(pairs, n=10)
        return f"{len(pairs)} cycles, min/deciles/max " + " ".join(
            f"{value:.2f}" for value in (pairs[0], *deciles, pairs[-1])
        )
    return " ".join(f"{pair:.2f}" for pair in pairs) or "n/a"


def ratio_interval(
    numerators: list[dict[str, Any]], denominators: list[dict[str, Any]], confidence: float = 0.9
) -> str:
    """A bootstrap interval for `ratio_of`: where the median of the per-round ratios would land,
    `confidence` of the time, if rounds like these were run again. On a machine whose speed moves
    within seconds a ratio of 0.96 can be a server 1% faster or 8% slower; this says which.
    Seeded, so the same rounds give the same interval."""
    pairs = round_ratios(numerators, denominators)
    if len(pairs) < 5:
        return "n/a"
    draws, rng = 2000, random.Random(0)
    medians = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(draws))
    tail = int((1 - confidence) / 2 * draws)
    return f"{medians[tail]:.2f}-{medians[draws - 1 - tail]:.2f}"
