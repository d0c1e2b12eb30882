"""Where a webhook delivery spends the server's CPU: in process, against PostgreSQL and a sandbox.

    .venv/bin/python -m bench.profile_webhook [--events 2000] [--concurrency 8] [--top 30, 0 for no profile]

Starts the bench's Stripe sandbox in its own process, seeds a fresh PostgreSQL database with
subscribed customers (as `make bench` does), then posts signed `customer.subscription.updated`
events straight into the app's ASGI callable, `concurrency` at a time. Prints the app's CPU per
event (the sandbox's is not counted) and cProfile's view of it. A development tool; `make bench`
stays the measurement of record.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import loadgen, procs, seed, wire
from bench.profile_call import lifespan, post


class SelfTimeSampler:
    """Samples the main thread's innermost frame every millisecond: self time by package."""

    def __init__(self) -> None:
        import threading

        self._thread_id = threading.get_ident()
        self._stop = threading.Event()
        self._counts: dict[str, int] = {}
        self._runner = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._runner.start()

    def stop(self) -> None:
        self._stop.set()
        self._runner.join()

    def _run(self) -> None:
        import sys

        while not self._stop.wait(0.001):
            frame = sys._current_frames().get(self._thread_id)
            if frame is None:
                continue
            path = frame.f_code.co_filename
            key = path.split("site-packages/")[-1].split("/")[0] if "site-packages" in path else path
            if "/work/" in key:
                key = key.split("/work/main/")[-1] + ":" + frame.f_code.co_name
            elif "python3.11/" in key:
                key = "stdlib " + key.split("python3.11/")[-1] + ":" + frame.f_code.co_name
            self._counts[key] = self._counts.get(key, 0) + 1

    def report(self) -> None:
        total = sum(self._counts.values())
        for key, count in sorted(self._counts.items(), key=lambda item: -item[1])[:40]:
            print(f"{100 * count / total:5.1f}% {key}")


async def main(events: int, concurrency: int, top: int) -> None:
    from service.app import create_app
    from service.process_tuning import ProcessTuning
    from service.settings import DEV_WEBHOOK_SECRET, Settings
    from stripe_sandbox import API_VERSION, sign_webhook_payload

    with tempfile.TemporaryDirectory() as workdir:
        sandbox = procs.start_server("sandbox", procs.listener(), {"BENCH_KIND": "sandbox"}, Path(workdir))
        procs.wait_ready(sandbox)
        database_url, db_name = seed.postgres_database()
        try:
            stripe = await seed.Stripe.connect(f"http://127.0.0.1:{sandbox.port}")
            try:
                seeded = await seed.seed(
                    database_url, "http://127.0.0.1:8000/mcp", stripe, webhook_customers=32, notify_accounts=0
                )
            finally:
                await stripe.aclose()
            settings = Settings(  # type: ignore[call-arg]
                _env_file=None,
                database_url=database_url,
                public_base_url="http://127.0.0.1:8000",
                stripe_secret_key=seed.SANDBOX_KEY,
                stripe_api_base=f"http://127.0.0.1:{sandbox.port}",
                stripe_sandbox_state_file=None,
                log_level="WARNING",
            )
            app = create_app(settings)
            task, queue = await lifespan(ProcessTuning(app, settings.tuning))  # as `serve` runs it
            spec = {
                "customers": [account.as_customer() for account in seeded.webhook_customers],
                "concurrency": concurrency,
                "api_version": API_VERSION,
                "lookup_key": "paid_mcp_pro_monthly",
                "tag": str(time.monotonic_ns()),
            }

            async def worker(index: int, count: int, offset: int) -> None:
                for sequence in range(offset, offset + count):
                    body = loadgen._webhook_body(spec, index, sequence)
                    headers = wire.header_block(
                        {
                            "Content-Type": "application/json",
                            "Stripe-Signature": sign_webhook_payload(
                                body, DEV_WEBHOOK_SECRET, int(time.time())
                            ),
                        }
                    )
                    _, answer = await post(app, "/webhooks/stripe", headers, body)
                    if b'"applied"' not in answer:
                        raise RuntimeError(answer[:300])

            await asyncio.gather(*(worker(index, 20, 0) for index in range(concurrency)))
            profiler = cProfile.Profile()
            started_cpu, started_wall = time.process_time(), time.perf_counter()
            from sqlalchemy import event as sa_event

            statements: dict[str, int] = {}

            def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
                verb = " ".join(statement.split())[:90]
                statements[verb] = statements.get(verb, 0) + 1

            sa_event.listen(app.state.runtime.engine.sync_engine, "before_cursor_execute", count)
            commits = app.state.runtime.webhooks._commits
            run_batch = commits._run_batch
            sizes: dict[int, int] = {}

            async def counted(batch: Any) -> Any:
                sizes[len(batch)] = sizes.get(len(batch), 0) + 1
                return await run_batch(batch)

            commits._run_batch = counted
            sampler = SelfTimeSampler() if top < 0 else None
            if top > 0:
                profiler.enable()
            if sampler:
                sampler.start()
            await asyncio.gather(*(worker(index, events // concurrency, 100) for index in range(concurrency)))
            profiler.disable()
            if sampler:
                sampler.stop()
            cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started_wall
            await queue.put({"type": "lifespan.shutdown"})
            await task
        finally:
            procs.stop_all()
            seed.drop_postgres_database(db_name)
    print("batch sizes:", dict(sorted(sizes.items())))
    print("SQL statements per event:", {verb: round(n / events, 2) for verb, n in statements.items()})
    profiled = " (profiled)" if top else ""
    print(f"{events} events: {cpu / events * 1e3:.2f} ms CPU each{profiled}, {events / wall:.0f}/s wall")
    if sampler:
        sampler.report()
    if top <= 0:
        return
    stats = pstats.Stats(profiler)
    by_package: dict[str, float] = {}
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, _, tottime, _, _) in raw.items():
        package = filename
        if "site-packages" in filename:
            package = filename.split("site-packages/")[-1].split("/")[0]
        if "/work/main/" in package:
            package = "/".join(package.split("/work/main/")[-1].split("/")[:2])
        elif "python3.11/" in package:
            package = "stdlib " + package.split("python3.11/")[-1].split("/")[0]
        by_package[package] = by_package.get(package, 0.0) + tottime
    total = sum(by_package.values())
    for package, seconds in sorted(by_package.items(), key=lambda item: -item[1])[:25]:
        print(f"{100 * seconds / total:5.1f}%  {seconds / events * 1e3:6.3f} ms/event  {package}")
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--top", type=int, default=30)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.events, arguments.concurrency, arguments.top))
