"""`python -m bench`: start the servers, run the scenarios, print and save one markdown table."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import gc_probe, login_flood, procs, seed, wire
from bench.interleaved import cycle_count, slice_seconds
from bench.report import Report, Row, fmt, machine, median, ratio_interval, ratio_of, ratio_spread, summarize
from bench.servers import STATIC_TOKEN

RESULTS = Path(__file__).resolve().parent / "results" / "latest.md"
SCENARIOS = ("throughput", "unentitled", "webhooks", "notify", "idle", "login-flood", "unpaid", "soak")
# Every paid server runs as deployed (k8s/base): JSON logs at INFO, /metrics on a port of its own.
PRODUCTION_LOGGING = {"log_level": "INFO", "log_format": "json", "metrics_enabled": True}
# `unpaid` opens 16 legacy sessions for its one unentitled user; the default cap is 10.
PAID_PROD_SESSION_CAP = 64
SOAK_SAMPLES = 20
# 8 deliveries at a time, and a burst of 64 (two per subscription of the 32 seeded, so events
# about one subscription overlap, as a checkout's half-dozen events do).
WEBHOOK_CONCURRENCY = (8, 64)
NOTIFY_SAMPLE_TIMEOUT = 10.0
# Unmeasured samples first, per case, as every other scenario has its warm-up: a server's first
# notice runs code paths (and compiles SQL) that no earlier scenario did, 35-150 ms instead of ~12.
NOTIFY_WARMUP_SAMPLES = 2
MODES = {
    # mode label -> (wire mode, server suffix)
    "legacy SSE": ("legacy", ""),
    "legacy JSON": ("legacy", "-json"),
    "2026-07-28": ("modern", ""),
}
SERVER_ORDER = ("bare", "bare-auth", "paid")
ACCESS_LINE = '"logger":"service.access"'
ACCESS_LINE_TIMEOUT = 10.0


@dataclass
class Options:
    rounds: int
    duration: float
    warmup: float
    cycles: int
    slice: float
    concurrency: list[int]
    scenarios: list[str]
    postgres: bool
    notify_samples: int
    idle_sessions: int
    soak_seconds: float
    output: Path
    paid_overrides: dict[str, Any] = field(default_factory=dict)
    # A/B runs: a "paid-alt" server with these settings over paid's, in the throughput turns.
    variant_overrides: dict[str, Any] | None = None


@dataclass
class Target:
    """A running server and the credentials a generator needs for it."""

    server: procs.Server
    token: str | None
    seeded: seed.Seeded | None = None
    database_url: str | None = None


@dataclass
class Bench:
    options: Options
    workdir: Path
    report: Report
    targets: dict[str, Target] = field(default_factory=dict)
    postgres_names: list[str] = field(default_factory=list)
    sandbox: procs.Server | None = None
    started: float = field(default_factory=time.monotonic)

    # -- servers ---------------------------------------------------------------------------

    def paid_settings(self, database_url: str, port: int, public_port: int | None = None) -> dict[str, Any]:
        return {
            "database_url": database_url,
            "public_base_url": f"http://127.0.0.1:{public_port or port}",
            "port": port,
            **PRODUCTION_LOGGING,
            # The bench's one standalone sandbox: no embedded sandbox starts in the server.
            "stripe_secret_key": seed.SANDBOX_KEY,
            "stripe_api_base": self.stripe_api_base,
            "stripe_sandbox_state_file": None,
            # The bench's one entitled user stands for many clients (64 connections, 1,000 idle sessions).
            "max_legacy_sessions_per_user": 100_000,
        } | self.options.paid_overrides

    @property
    def stripe_api_base(self) -> str:
        assert self.sandbox is not None
        return f"http://127.0.0.1:{self.sandbox.port}"

    def start(self) -> None:
        options = self.options
        wanted = {"bare", "bare-auth", "paid"}
        if "throughput" in options.scenarios:
            wanted |= {"bare-json", "bare-auth-json", "paid-json"}
            if options.variant_overrides is not None:
                wanted |= {"paid-alt", "paid-alt-json"}
        if options.postgres and {"webhooks", "notify"} & set(options.scenarios):
            wanted.add("paid-pg")
        if options.postgres and "notify" in options.scenarios:
            wanted.add("paid-pg-b")  # a second replica on paid-pg's database (cross-replica notify)
        if "login-flood" in options.scenarios:
            wanted |= {"paid-flood", "paid-flood-pg"} if options.postgres else {"paid-flood"}
        if {"unpaid", "soak"} & set(options.scenarios):
            wanted.add("paid-prod")
        self.sandbox = procs.start_server(
            "sandbox", procs.listener(), {"BENCH_KIND": "sandbox"}, self.workdir
        )
        procs.wait_ready(self.sandbox)
        print(f"  started sandbox (Stripe) on 127.0.0.1:{self.sandbox.port}", flush=True)
        pending: list[tuple[str, int, dict[str, str]]] = []
        listeners = {name: procs.listener() for name in wanted}
        ports = {name: procs.port_of(sock) for name, sock in listeners.items()}
        for name in sorted(wanted):
            port = ports[name]
            env = {"BENCH_JSON": "1" if name.endswith("-json") else "0"}
            if name.startswith("bare"):
                env["BENCH_KIND"] = "bare-auth" if name.startswith("bare-auth") else "bare"
                env["PYTHONPATH"] = procs.WITHOUT_SNIFFIO
                token = STATIC_TOKEN if name.startswith("bare-auth") else None
                pending.append((name, port, env))
                self.targets[name] = Target(server=None, token=token)  # type: ignore[arg-type]
                continue
            env["BENCH_KIND"] = "paid"
            if name == "paid-pg-b":
                # Replica B: paid-pg's database, public URL, Stripe and state keys; its own port.
                primary = self.targets["paid-pg"]
                assert primary.database_url is not None
                env["BENCH_SETTINGS"] = json.dumps(
                    self.paid_settings(primary.database_url, port, public_port=ports["paid-pg"])
                )
                pending.append((name, port, env))
                self.targets[name] = Target(
                    server=None,  # type: ignore[arg-type]
                    token=primary.token,
                    seeded=primary.seeded,
                    database_url=primary.database_url,
                )
                continue
            if name in ("paid-pg", "paid-flood-pg"):
                database_url, db_name = seed.postgres_database()
                self.postgres_names.append(db_name)
            else:
                database_url = seed.sqlite_database(self.workdir, name)
            notify = (
                options.notify_samples + NOTIFY_WARMUP_SAMPLES
                if name in ("paid", "paid-pg") and "notify" in options.scenarios
                else 0
            )
            if name == "paid-pg" and "paid-pg-b" in wanted:
                notify *= 2  # the second half is for the cross-replica samples
            started = time.monotonic()
            seeded = asyncio.run(
                self.seed(
                    database_url,
                    f"http://127.0.0.1:{port}/mcp",
                    webhook_customers=32 if name in ("paid", "paid-pg") else 8 if "flood" in name else 0,
                    notify_accounts=notify,
                )
            )
            print(f"  seeded {name} ({time.monotonic() - started:.1f} s)", flush=True)
            settings = self.paid_settings(database_url, port)
            if name.startswith("paid-alt"):
                settings |= options.variant_overrides or {}
            if name.startswith("paid-flood"):
                settings |= login_flood.PRODUCTION_LIKE
            if name == "paid-prod":
                settings |= {"max_legacy_sessions_per_user": PAID_PROD_SESSION_CAP}
            env["BENCH_SETTINGS"] = json.dumps(settings)
            pending.append((name, port, env))
            self.targets[name] = Target(
                server=None,  # type: ignore[arg-type]
                token=seeded.entitled.token,
                seeded=seeded,
                database_url=database_url,
            )
        for name, _, env in pending:
            self.targets[name].server = procs.start_server(name, listeners[name], env, self.workdir)
        for name, _, _ in pending:
            procs.wait_ready(self.targets[name].server)
            print(f"  started {name} on 127.0.0.1:{self.targets[name].server.port}", flush=True)
        asyncio.run(self.smoke())

    async def seed(self, database_url: str, resource_url: str, **counts: int) -> seed.Seeded:
        stripe = await seed.Stripe.connect(self.stripe_api_base)
        try:
            return await seed.seed(database_url, resource_url, stripe, **counts)
        finally:
            await stripe.aclose()

    async def smoke(self) -> None:
        """One real call per server and mode, checked before anything is measured."""
        for name, target in self.targets.items():
            modes = ["legacy"] + ([] if name.endswith("-json") else ["modern"])
            for mode in modes:
                conn, headers = await wire.open_caller(target.server.port, target.token, mode)
                try:
                    response = await conn.request("POST", "/mcp", headers, wire.call_body(mode, 2))
                finally:
                    conn.close()
                message = response.json_message()
                content_type = response.headers.get("content-type", "")
                if "result" not in message or message["result"].get("isError"):
                    raise RuntimeError(f"smoke call failed on {name} {mode}: {message}")
                if name.endswith("-json") and "application/json" not in content_type:
                    raise RuntimeError(f"{name} answered {content_type}, not JSON")
        self.check_production_logging()

    def check_production_logging(self) -> None:
        """Each paid server wrote the JSON access lines of the smoke calls, as deployed: a server
        that logged nothing would flatter us."""
        if {"log_level", "log_format"} & set(self.options.paid_overrides):
            print("  ! paid servers' logging overridden: not the deployed configuration", flush=True)
            return
        deadline = time.monotonic() + ACCESS_LINE_TIMEOUT
        for name, target in self.targets.items():
            if not name.startswith("paid"):
                continue
            while ACCESS_LINE not in target.server.log.read_text(errors="replace"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} wrote no JSON access line: is production logging on?")
                time.sleep(0.05)

    def stop(self) -> None:
        procs.stop_all()
        for name in self.postgres_names:
            seed.drop_postgres_database(name)

    # -- helpers ---------------------------------------------------------------------------

    def load(self, target_name: str, **spec: Any) -> dict[str, Any]:
        target = self.targets[target_name]
        full = {
            "kind": "calls",
            "port": target.server.port,
            "token": target.token,
            "server_pid": target.server.pid,
            "duration": self.options.duration,
            "warmup": self.options.warmup,
            **spec,
        }
        result = procs.run_generator(full)
        if result["errors"]:
            print(f"    ! {target_name} {spec}: {result['errors']} errors, first: {result['first_error']}")
        return result

    def collected_around(self, target_name: str, **spec: Any) -> tuple[list[dict[str, Any]], str]:
        """`load` for every round, and what the server's garbage collector did meanwhile: the
        share of wall time it paused the process (median over rounds), full collections, and the
        longest pause (`bench/gc_probe.py`)."""
        server = self.targets[target_name].server
        results: list[dict[str, Any]] = []
        windows: list[dict[str, float]] = []
        for _ in range(self.options.rounds):
            before = server.gc_reading()
            results.append(self.load(target_name, **spec))
            windows.append(gc_probe.between(before, server.gc_reading()))
        share = statistics.median(window["share"] for window in windows)
        full = sum(int(window["full"]) for window in windows)
        longest = max(window["longest_ms"] for window in windows)
        return results, f"{share * 100:.1f}% of the time, {full} full, longest {longest:.1f} ms"

    # -- scenarios -------------------------------------------------------------------------

    def throughput(self) -> None:
        """Per mode and concurrency, the three servers in turns of short slices from one generator
        (`bench/interleaved.py`); ratios are medians of per-cycle ratios."""
        options = self.options
        order = SERVER_ORDER + (("paid-alt",) if options.variant_overrides is not None else ())
        for label, (mode, suffix) in MODES.items():
            for concurrency in options.concurrency:
                names = [base + suffix for base in order]
                slice_bound = slice_seconds(options.slice, concurrency)
                result = procs.run_generator(
                    {
                        "kind": "interleaved",
                        "mode": mode,
                        "concurrency": concurrency,
                        "expect": "result",
                        "warmup": options.warmup,
                        "slice": options.slice,
                        "cycles": options.cycles,
                        "bound": len(names)
                        * (options.warmup + cycle_count(options.cycles, concurrency) * (slice_bound + 1.0)),
                        "targets": [
                            {
                                "name": name,
                                "port": self.targets[name].server.port,
                                "token": self.targets[name].token,
                                "server_pid": self.targets[name].server.pid,
                            }
                            for name in names
                        ],
                    }
                )
                cycles = {
                    base: [{"rps": rate} for rate in result["targets"][base + suffix]["rates"]]
                    for base in order
                }
                for base in order:
                    self._throughput_row(label, concurrency, base, suffix, result, cycles)

    def _throughput_row(
        self,
        label: str,
        concurrency: int,
        base: str,
        suffix: str,
        result: dict[str, Any],
        cycles: dict[str, list[dict[str, Any]]],
    ) -> None:
        measured = result["targets"][base + suffix]
        notes = []
        if base == "paid" and suffix:
            notes.append("MCP_JSON_RESPONSE=true")
        if base == "paid-alt":
            notes.append(f"vs paid: {fmt(ratio_of(cycles[base], cycles['paid']), 2, 'x')}")
            notes.append(f"90% interval vs paid: {ratio_interval(cycles[base], cycles['paid'])}")
        if base != "bare":
            notes.append(f"90% interval vs bare: {ratio_interval(cycles[base], cycles['bare'])}")
            notes.append(f"cycles vs bare: {ratio_spread(cycles[base], cycles['bare'])}")
        if measured["errors"]:
            notes.insert(0, f"{measured['errors']} errors, first: {measured['first_error']}")
        print(
            f"  {label:12} c={concurrency:<3} {base + suffix:15} "
            f"{median(measured['rates']) or 0:8.0f} calls/s p50 {fmt(measured['p50_ms'], 2)} ms "
            f"vs bare {fmt(ratio_of(cycles[base], cycles['bare']), 2, 'x')}",
            flush=True,
        )
        self.report.rows.append(
            Row(
                scenario=f"tools/call {label} c={concurrency}",
                server=base + suffix,
                metric="calls/s",
                value=fmt(median(measured["rates"]), 0),
                p50=fmt(measured["p50_ms"], 2),
                p99=fmt(measured["p99_ms"], 2),
                ratio=fmt(ratio_of(cycles[base], cycles["bare"]), 2, "x"),
                ratio_auth=fmt(ratio_of(cycles[base], cycles["bare-auth"]), 2, "x"),
                generator_cpu=fmt(result["generator_cpu"], 2),
                server_cpu=fmt(median(measured["server_cpu"]), 2),
                note="; ".join(notes),
            )
        )

    def unentitled(self) -> None:
        """A paid call by a user without a subscription: -32042 (legacy) or InputRequiredResult."""
        target = self.targets["paid"]
        assert target.seeded is not None
        cases = [
            ("legacy SSE", "legacy", "url_elicitation", "-32042"),
            ("2026-07-28", "modern", "input_required", "InputRequiredResult"),
        ]
        for label, mode, expect, answer in cases:
            for concurrency in (1, 16):
                runs, bare = [], []
                for _ in range(self.options.rounds):
                    bare.append(self.load("bare", mode=mode, concurrency=concurrency, expect="result"))
                    runs.append(
                        self.load(
                            "paid",
                            mode=mode,
                            concurrency=concurrency,
                            expect=expect,
                            token=target.seeded.unentitled.token,
                        )
                    )
                summary = summarize(runs)
                print(f"  unentitled {label} c={concurrency}: {fmt(summary['rps'], 0)}/s", flush=True)
                self.report.rows.append(
                    Row(
                        scenario=f"unentitled -> {answer} c={concurrency}",
                        server="paid",
                        metric="answers/s",
                        value=fmt(summary["rps"], 0),
                        p50=fmt(summary["p50_ms"], 2),
                        p99=fmt(summary["p99_ms"], 2),
                        ratio=fmt(ratio_of(runs, bare), 2, "x"),
                        generator_cpu=fmt(summary["generator_cpu"], 2),
                        server_cpu=fmt(summary["server_cpu"], 2),
                        note=f"{label}; vs bare = vs the bare server's successful call"
                        + (f"; {summary['errors']} errors" if summary["errors"] else ""),
                    )
                )

    def webhooks(self) -> None:
        """Signed customer.subscription.updated events: verified, stored, applied (200 "applied")."""
        from service.settings import DEV_WEBHOOK_SECRET
        from stripe_sandbox import API_VERSION

        backends = [("SQLite", "paid")] + ([("PostgreSQL", "paid-pg")] if "paid-pg" in self.targets else [])
        for (backend, name), concurrency in itertools.product(backends, WEBHOOK_CONCURRENCY):
            target = self.targets[name]
            assert target.seeded is not None
            customers = [account.as_customer() for account in target.seeded.webhook_customers]
            runs = []
            for round_index in range(self.options.rounds):
                runs.append(
                    self.load(
                        name,
                        kind="webhooks",
                        concurrency=concurrency,
                        customers=customers,
                        secret=DEV_WEBHOOK_SECRET,
                        api_version=API_VERSION,
                        lookup_key="paid_mcp_pro_monthly",
                        tag=f"{round_index}{time.monotonic_ns()}",
                    )
                )
            summary = summarize(runs)
            print(f"  webhooks {backend} c={concurrency}: {fmt(summary['rps'], 0)} events/s", flush=True)
            self.report.rows.append(
                Row(
                    scenario=f"webhook ingestion c={concurrency}",
                    server=f"paid ({backend})",
                    metric="events/s",
                    value=fmt(summary["rps"], 0),
                    p50=fmt(summary["p50_ms"], 2),
                    p99=fmt(summary["p99_ms"], 2),
                    generator_cpu=fmt(summary["generator_cpu"], 2),
                    server_cpu=fmt(summary["server_cpu"], 2),
                    note="target >= 500/s on PostgreSQL; 32 real sandbox subscriptions, each event "
                    "re-read from the bench's sandbox process, which shares the cores (GET "
                    "/v1/subscriptions/{id}; overlapping events about one subscription share a read)"
                    + (f"; {summary['errors']} errors" if summary["errors"] else ""),
                )
            )

    def login_flood(self) -> None:
        """/readyz, a free tool call and a webhook, with and without a wrong-password login flood."""
        login_flood.measure(self)

    def notify(self) -> None:
        """Signed checkout.session.completed POST -> notifications/elicitation/complete on the GET stream."""
        from service.settings import DEV_WEBHOOK_SECRET

        # (label, session server, webhook server, which notify accounts, target)
        cases: list[tuple[str, str, str, slice, str]] = [
            ("SQLite", "paid", "paid", slice(None), "one replica")
        ]
        if "paid-pg" in self.targets:
            half = self.options.notify_samples + NOTIFY_WARMUP_SAMPLES
            both = "paid-pg-b" in self.targets
            cases.append(
                ("PostgreSQL", "paid-pg", "paid-pg", slice(0, half if both else None), "one replica")
            )
            if both:
                cases.append(
                    ("PostgreSQL", "paid-pg", "paid-pg-b", slice(half, None), "across replicas (A -> B)")
                )
        for backend, name, hook_name, part, replicas in cases:
            target, hook_target = self.targets[name], self.targets[hook_name]
            assert target.seeded is not None
            accounts = target.seeded.notify_accounts[part]
            if not accounts:
                continue
            result = asyncio.run(
                notification_latency(
                    target.server.port,
                    hook_target.server.port,
                    accounts,
                    DEV_WEBHOOK_SECRET,
                    self.stripe_api_base,
                    self.started,
                )
            )
            print(f"  notify {backend} {replicas}: {result}", flush=True)
            target_ms = 20 if name == hook_name else 100
            server = f"paid ({backend})" if name == hook_name else f"{name} + {hook_name} ({backend})"
            self.report.rows.append(
                Row(
                    scenario=f"webhook -> elicitation/complete, {replicas}",
                    server=server,
                    metric="latency",
                    value=f"{result['count']} samples",
                    p50=fmt(result["p50_ms"], 2),
                    p99=fmt(result["p99_ms"], 2),
                    note=f"target p99 <= {target_ms} ms; checkout.session.completed (3 Stripe reads in one "
                    "round trip: subscription, invoice payments, customer's charges; before the "
                    "transaction); webhook answered "
                    f"p50 {fmt(result['post_p50_ms'], 2)} ms; slowest {', '.join(result['slowest'])}"
                    + (f"; {result['errors']} failed: {result['first_error']}" if result["errors"] else ""),
                )
            )

    def idle(self) -> None:
        """RSS per idle legacy session with an open GET stream; throughput next to them."""
        sessions = self.options.idle_sessions
        for name in ("bare", "paid"):
            target = self.targets[name]
            before, gc_before = self.collected_around(name, mode="legacy", concurrency=16)
            rss_before = target.server.rss_kib()
            holder = procs.spawn(
                [
                    sys.executable,
                    "-m",
                    "bench.loadgen",
                    json.dumps(
                        {
                            "kind": "idle",
                            "port": target.server.port,
                            "token": target.token,
                            "sessions": sessions,
                            "hold_seconds": 600,
                        }
                    ),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert holder.stdout is not None
                opened = json.loads(holder.stdout.readline() or "{}")
                time.sleep(1.0)  # let the server settle after the burst of opens
                rss_after = target.server.rss_kib()
                during, gc_during = self.collected_around(name, mode="legacy", concurrency=16)
            finally:
                if holder.stdin is not None:
                    holder.stdin.close()
                try:
                    holder.wait(timeout=90)
                finally:
                    procs.forget(holder)
            count = int(opened.get("opened", 0))
            per_session = (rss_after - rss_before) / count if count else None
            without, with_idle = summarize(before), summarize(during)
            print(f"  idle {name}: {opened}, {fmt(per_session)} KiB/session", flush=True)
            failed = (
                f"; {opened.get('failed')} failed: {opened.get('first_error')}"
                if opened.get("failed")
                else ""
            )
            self.report.rows.append(
                Row(
                    scenario=f"memory per idle legacy session + GET stream (N={count})",
                    server=name,
                    metric="RSS KiB/session",
                    value=fmt(per_session, 1),
                    note=f"RSS {rss_before / 1024:.0f} -> {rss_after / 1024:.0f} MiB{failed}",
                )
            )
            self.report.rows.append(
                Row(
                    scenario=f"tools/call legacy SSE c=16 with {count} idle sessions",
                    server=name,
                    metric="calls/s",
                    value=fmt(with_idle["rps"], 0),
                    p50=fmt(with_idle["p50_ms"], 2),
                    p99=fmt(with_idle["p99_ms"], 2),
                    ratio=fmt(ratio_of(during, before), 2, "x") + " vs none",
                    generator_cpu=fmt(with_idle["generator_cpu"], 2),
                    server_cpu=fmt(with_idle["server_cpu"], 2),
                    note=f"without idle sessions: {fmt(without['rps'], 0)} calls/s, p50 "
                    f"{fmt(without['p50_ms'], 2)} ms, p99 {fmt(without['p99_ms'], 2)} ms; garbage collector "
                    f"with / without: {gc_during} / {gc_before}",
                )
            )

    def unpaid(self) -> None:
        """The unentitled answer (unpaid call, open elicitation) of `paid-prod`, in turns with the
        bare server's successful call from one generator: the ratio is per cycle, as in throughput."""
        target = self.targets["paid-prod"]
        assert target.seeded is not None
        options = self.options
        cases = [
            ("legacy SSE", "legacy", "url_elicitation", "-32042"),
            ("2026-07-28", "modern", "input_required", "InputRequiredResult"),
        ]
        for label, mode, expect, answer in cases:
            for concurrency in (1, 16):
                slice_bound = slice_seconds(options.slice, concurrency)
                targets = [
                    {
                        "name": "bare",
                        "port": self.targets["bare"].server.port,
                        "token": None,
                        "expect": "result",
                    },
                    {
                        "name": "paid-prod",
                        "port": target.server.port,
                        "token": target.seeded.unentitled.token,
                        "expect": expect,
                    },
                ]
                for item in targets:
                    item["server_pid"] = self.targets[str(item["name"])].server.pid
                result = procs.run_generator(
                    {
                        "kind": "interleaved",
                        "mode": mode,
                        "concurrency": concurrency,
                        "warmup": options.warmup,
                        "slice": options.slice,
                        "cycles": options.cycles,
                        "bound": 2
                        * (options.warmup + cycle_count(options.cycles, concurrency) * (slice_bound + 1.0)),
                        "targets": targets,
                    }
                )
                measured = result["targets"]
                cycles = {name: [{"rps": rate} for rate in measured[name]["rates"]] for name in measured}
                paid, bare = measured["paid-prod"], measured["bare"]
                ratio = ratio_of(cycles["paid-prod"], cycles["bare"])
                print(
                    f"  unpaid {label:12} c={concurrency:<3} {median(paid['rates']) or 0:8.0f} answers/s "
                    f"vs bare's calls {median(bare['rates']) or 0:8.0f}/s: {fmt(ratio, 2, 'x')}",
                    flush=True,
                )
                notes = [
                    f"{label}; vs bare = vs the bare server's successful call, in turns",
                    f"bare {fmt(median(bare['rates']), 0)} calls/s, p50 {fmt(bare['p50_ms'], 2)} ms",
                    f"90% interval: {ratio_interval(cycles['paid-prod'], cycles['bare'])}",
                    "LOG_FORMAT=json LOG_LEVEL=INFO metrics on",
                ]
                for name, item in measured.items():
                    if item["errors"]:
                        notes.append(f"{name}: {item['errors']} errors, first: {item['first_error']}")
                self.report.rows.append(
                    Row(
                        scenario=f"unpaid -> {answer} c={concurrency}",
                        server="paid-prod",
                        metric="answers/s",
                        value=fmt(median(paid["rates"]), 0),
                        p50=fmt(paid["p50_ms"], 2),
                        p99=fmt(paid["p99_ms"], 2),
                        ratio=fmt(ratio, 2, "x"),
                        generator_cpu=fmt(result["generator_cpu"], 2),
                        server_cpu=fmt(median(paid["server_cpu"]), 2),
                        note="; ".join(notes),
                    )
                )

    def soak(self) -> None:
        """Two clients loop initialize -> unpaid call -> DELETE on `paid-prod`; its RSS and its
        elicitation, delivery and audit row counts are read SOAK_SAMPLES times along the way."""
        target = self.targets["paid-prod"]
        assert target.seeded is not None
        assert target.database_url is not None
        seconds = self.options.soak_seconds
        spec = {
            "kind": "soak",
            "port": target.server.port,
            "token": target.seeded.unentitled.token,
            "clients": 2,
            "duration": seconds,
        }
        generator = procs.spawn(
            [sys.executable, "-m", "bench.loadgen", json.dumps(spec)], stdout=subprocess.PIPE, text=True
        )
        samples: list[tuple[float, int, dict[str, int]]] = []
        started = time.monotonic()
        try:
            for index in range(SOAK_SAMPLES + 1):
                time.sleep(max(0.0, started + index * seconds / SOAK_SAMPLES - time.monotonic()))
                samples.append(
                    (time.monotonic() - started, target.server.rss_kib(), soak_rows(target.database_url))
                )
            out, _ = generator.communicate(timeout=120)
        finally:
            procs.forget(generator)
        done = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        print(f"  soak: {done}", flush=True)
        for at, rss, rows in samples:
            print(f"    {at:6.0f} s RSS {rss / 1024:6.1f} MiB rows {rows}", flush=True)
        first, last = samples[0], samples[-1]
        # From the first minute on: the start-up heap and the first caches are not what a soak measures.
        settled = next((sample for sample in samples if sample[0] >= min(60.0, seconds / 4)), first)
        growth = (last[1] - settled[1]) / 1024 / max(1e-9, (last[0] - settled[0]) / 3600)
        trail = ", ".join(
            f"{at / 60:.1f} min {rss / 1024:.1f}" for at, rss, _ in samples[:: max(1, SOAK_SAMPLES // 10)]
        )
        self.report.rows.append(
            Row(
                scenario=f"soak: initialize -> unpaid call -> DELETE, 2 clients, {seconds:g} s",
                server="paid-prod",
                metric="RSS MiB/hour after the first minute",
                value=fmt(growth, 1),
                note=f"{done.get('rounds')} rounds, {done.get('errors')} errors"
                + (f" (first: {done.get('first_error')})" if done.get("errors") else "")
                + f"; RSS MiB: {trail}, end {last[1] / 1024:.1f}",
            )
        )
        for table in SOAK_TABLES:
            trail = ", ".join(
                f"{at / 60:.1f} min {rows[table]}" for at, _, rows in samples[:: max(1, SOAK_SAMPLES // 10)]
            )
            self.report.rows.append(
                Row(
                    scenario=f"soak: {table} rows",
                    server="paid-prod",
                    metric="rows added",
                    value=str(last[2][table] - first[2][table]),
                    note=f"{trail}, end {last[2][table]}",
                )
            )


SOAK_TABLES = ("elicitation", "elicitation_delivery", "audit_event")


def soak_rows(database_url: str) -> dict[str, int]:
    """Row counts of the soak's tables, read from the SQLite file without writing to it."""
    path = database_url.removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)) as db:
        return {
            table: int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608 - fixed names
            for table in SOAK_TABLES
        }


async def notification_latency(
    port: int,
    hook_port: int,
    accounts: list[seed.Account],
    secret: str,
    stripe_api_base: str,
    origin: float,
) -> dict[str, Any]:
    """One sample per account (each becomes entitled by its sample), sequential, each bounded; the
    first NOTIFY_WARMUP_SAMPLES are not counted.

    Per sample, unmeasured: a legacy session and its GET stream on `port`, the paid call (-32042 with
    an elicitation id), then a real checkout in the sandbox for that elicitation, paid with the test
    card, and the sandbox's own `checkout.session.completed` event. Measured: from posting that event
    (signed) to `hook_port` until `notifications/elicitation/complete` arrives on the GET stream.
    """
    from stripe_sandbox import sign_webhook_payload

    stripe = await seed.Stripe.connect(stripe_api_base)
    latencies: list[float] = []
    when: list[tuple[float, float]] = []  # (latency, seconds since the bench started)
    post_times: list[float] = []
    errors: list[str] = []
    try:
        for sample, account in enumerate(accounts):
            control, stream, hook = wire.Connection(port), wire.Connection(port), wire.Connection(hook_port)
            waiter: asyncio.Task[float] | None = None
            try:
                async with asyncio.timeout(NOTIFY_SAMPLE_TIMEOUT):
                    await control.open()
                    session_id = await wire.open_legacy_session(control, account.token)
                    await stream.open()
                    await wire.open_get_stream(stream, account.token, session_id)
                    headers = wire.mcp_headers(
                        account.token, session_id=session_id, version=wire.LEGACY_VERSION
                    )
                    answer = (
                        await control.request("POST", "/mcp", headers, wire.legacy_call_body(2))
                    ).json_message()
                    if answer.get("error", {}).get("code") != -32042:
                        raise wire.WireError(f"expected -32042, got {str(answer)[:200]}")
                    elicitation_id = answer["error"]["data"]["elicitations"][0]["elicitationId"]
                    checkout = await stripe.checkout(account, elicitation_id)
                    await stripe.pay(checkout.id)
                    body = json.dumps(await stripe.completed_event(checkout.id)).encode()

                    async def completion(
                        stream: wire.Connection = stream, wanted: str = elicitation_id
                    ) -> float:
                        async for data in stream.sse_events():
                            message = json.loads(data)
                            params = message.get("params") or {}
                            if (
                                message.get("method") == "notifications/elicitation/complete"
                                and params.get("elicitationId") == wanted
                            ):
                                return time.perf_counter()
                        raise wire.WireError("GET stream ended without the completion")

                    waiter = asyncio.create_task(completion())
                    await hook.open()
                    hook_headers = wire.header_block(
                        {
                            "Content-Type": "application/json",
                            "Stripe-Signature": sign_webhook_payload(body, secret, int(time.time())),
                        }
                    )
                    posted_at = time.monotonic() - origin
                    started = time.perf_counter()
                    response = await hook.request("POST", "/webhooks/stripe", hook_headers, body)
                    post_time = time.perf_counter() - started
                    if response.status != 200 or b'"applied"' not in response.body:
                        raise wire.WireError(f"webhook answered {response.status}: {response.body[:200]!r}")
                    latency = await waiter - started
                    if sample >= NOTIFY_WARMUP_SAMPLES:
                        latencies.append(latency)
                        post_times.append(post_time)
                        when.append((latency, posted_at))
            except (OSError, TimeoutError, wire.WireError, KeyError, ValueError, RuntimeError) as exc:
                errors.append(repr(exc)[:200])
            except Exception as exc:  # a stripe-python error: count it, keep sampling
                errors.append(repr(exc)[:200])
            finally:
                if waiter is not None and not waiter.done():
                    waiter.cancel()
                for conn in (control, stream, hook):
                    conn.close()
    finally:
        await stripe.aclose()
    ordered, posts = sorted(latencies), sorted(post_times)

    def pick(values: list[float], fraction: float) -> float | None:
        return values[min(len(values) - 1, round(fraction * (len(values) - 1)))] * 1000 if values else None

    return {
        "count": len(ordered),
        "p50_ms": pick(ordered, 0.5),
        "p99_ms": pick(ordered, 0.99),
        "post_p50_ms": pick(posts, 0.5),
        # The slowest samples and when they were posted (bench seconds): lines a tail up with timers.
        "slowest": [f"{latency * 1000:.1f} ms at {at:.1f} s" for latency, at in sorted(when)[-3:][::-1]],
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def settings_object(parser: argparse.ArgumentParser, option: str, text: str) -> dict[str, Any]:
    """An option's JSON object of settings; a parser error for anything else."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        parser.error(f"{option} is not JSON: {exc}")
    if not isinstance(value, dict):
        parser.error(f"{option} must be a JSON object")
    return value


def parse_options(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per measurement (default 3)")
    parser.add_argument("--duration", type=float, default=4.0, help="measured seconds per round")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each round")
    parser.add_argument(
        "--cycles",
        type=int,
        default=21,
        help="throughput: turns of bare, bare-auth, paid, rotated (default 21; 4x at c=1, at half the slice)",
    )
    parser.add_argument("--slice", type=float, default=0.5, help="throughput: seconds per server per turn")
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated (default 1,16,64)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"subset of {','.join(SCENARIOS)}")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL measurements")
    parser.add_argument("--notify-samples", type=int, default=100)
    parser.add_argument("--idle-sessions", type=int, default=1000)
    parser.add_argument("--soak-seconds", type=float, default=600.0, help="soak: how long (default 600)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--paid-settings",
        default="{}",
        help="experiments only: settings over every paid server's, as JSON "
        """(e.g. '{"log_level": "WARNING"}'); the report's command names them""",
    )
    parser.add_argument(
        "--variant-settings",
        help="A/B runs: a paid-alt server with these settings over paid's (JSON), served in the "
        "throughput scenario's turns next to paid, and compared with it",
    )
    args = parser.parse_args(argv)
    scenarios = [name for name in args.scenarios.split(",") if name]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    if not 1 <= args.rounds <= 20 or not 0.5 <= args.duration <= 60:
        parser.error("rounds must be 1..20 and duration 0.5..60 s")
    if not 2 <= args.cycles <= 200 or not 0.1 <= args.slice <= 10:
        parser.error("cycles must be 2..200 and slice 0.1..10 s")
    paid_overrides = settings_object(parser, "--paid-settings", args.paid_settings)
    variant_overrides = (
        None
        if args.variant_settings is None
        else settings_object(parser, "--variant-settings", args.variant_settings)
    )
    return Options(
        rounds=args.rounds,
        duration=args.duration,
        warmup=args.warmup,
        cycles=args.cycles,
        slice=args.slice,
        concurrency=[int(value) for value in args.concurrency.split(",")],
        scenarios=scenarios,
        postgres=not args.no_postgres and seed.postgres_available(),
        notify_samples=min(args.notify_samples, 1000),
        idle_sessions=min(args.idle_sessions, 5000),
        soak_seconds=min(max(args.soak_seconds, 10.0), 3600.0),
        output=args.output,
        paid_overrides=paid_overrides,
        variant_overrides=variant_overrides,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    options = parse_options(argv)
    procs.install_cleanup()
    started, clock = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), time.monotonic()
    command = shlex.join([".venv/bin/python", "-m", "bench", *argv])
    settings = (
        f"throughput: {options.cycles} cycles x {options.slice:g} s slices per server "
        f"(c=1: {cycle_count(options.cycles, 1)} x {slice_seconds(options.slice, 1):g} s; "
        f"c=64: {slice_seconds(options.slice, 64):g} s) "
        f"(+{options.warmup:g} s warm-up); other scenarios: {options.rounds} rounds x "
        f"{options.duration:g} s (+{options.warmup:g} s warm-up); "
        f"concurrency {','.join(map(str, options.concurrency))}, scenarios {','.join(options.scenarios)}"
    )
    report = Report(command=command, settings=settings)
    with tempfile.TemporaryDirectory(prefix="bench-") as workdir:
        bench = Bench(options, Path(workdir), report)
        try:
            print("starting servers", flush=True)
            bench.start()
            for scenario in options.scenarios:
                # Elapsed time, to line a scenario up with the servers' timers (the paid servers'
                # first reconciliation with Stripe runs RECONCILE_INTERVAL_SECONDS after start-up).
                print(f"scenario {scenario} (at {time.monotonic() - clock:.0f} s)", flush=True)
                getattr(bench, scenario.replace("-", "_"))()
        finally:
            bench.stop()
    document = report.markdown(machine(), started, time.monotonic() - clock)
    print()
    print(document)
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(document)
    print(f"written to {options.output}")
    return 0
