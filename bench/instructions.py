"""Instructions per tools/call, counted by callgrind: the bench's noise-free yardstick.

    .venv/bin/python -m bench.instructions [--mode legacy|modern] [--calls 500] [--servers bare,paid]
                                            [--logs production|off]

The shared 2-core machines this project is measured on change speed by 2x within minutes, so two
timings of the same code can differ by more than the change being judged. Instruction counts do
not move with the machine. This runs `bench.profile_call`'s in-process comparison (an ASGI scope
and a body straight into each app, no sockets) under valgrind's callgrind, counts only the
measured windows (a tiny C shim issues callgrind's client requests), with the garbage collector
off inside them so a collection landing in one window and not the other does not count as a
difference, and prints instructions per call for each server. Run it in two checkouts to judge a
change; repeat windows of one server agree to about 0.1%.

Instructions are not time: a call that touches more memory can be slower at the same count (see
bench/README.md). Needs valgrind and a C compiler (both on the project's machines).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import profile_call, servers

SHIM = r"""
#include <valgrind/callgrind.h>
void window_open(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void window_close(const char *label) { CALLGRIND_DUMP_STATS_AT(label); CALLGRIND_STOP_INSTRUMENTATION; }
"""
SERVERS = ("bare", "bare-auth", "paid")


def build_shim(workdir: Path) -> Path:
    source, library = workdir / "shim.c", workdir / "libshim.so"
    source.write_text(SHIM)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


async def count_windows(shim: ctypes.CDLL, mode: str, calls: int, names: list[str]) -> None:
    """Inside valgrind: each server's calls in a window of its own (two per server: the first
    warms caches and specializations the second should not pay for)."""
    os.environ.setdefault("BENCH_PORT", "8000")
    with tempfile.TemporaryDirectory() as workdir:
        apps = {
            "bare": (servers.bare_app(with_auth=False), servers.STATIC_TOKEN),
            "bare-auth": (servers.bare_app(with_auth=True), servers.STATIC_TOKEN),
        }
        if "paid" in names:
            apps["paid"] = await profile_call.paid_app(Path(workdir))
        lifespans = [await profile_call.lifespan(app) for app, _ in apps.values()]
        own_process = profile_call.OwnProcess()
        for name in names:
            app, token = apps[name]
            own_process.enter(name)
            headers = await profile_call.caller_headers(app, token, mode)
            for window in ("warm", "counted"):
                gc.collect()
                gc.disable()
                shim.window_open()
                await profile_call.measure(app, headers, calls, 1, mode=mode)
                shim.window_close(f"{name}:{window}".encode())
                gc.enable()
        for _, queue in lifespans:
            await queue.put({"type": "lifespan.shutdown"})


def run_under_valgrind(arguments: argparse.Namespace) -> dict[str, int]:
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.instructions needs valgrind (Debian: apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as workdir:
        shim = build_shim(Path(workdir))
        output = Path(workdir) / "callgrind.out"
        command = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={output}",
            sys.executable, "-m", "bench.instructions", "--inside", str(shim),
            "--mode", arguments.mode, "--calls", str(arguments.calls), "--servers", arguments.servers,
            "--logs", arguments.logs,
        ]  # fmt: skip
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        counts: dict[str, int] = {}
        for dump in Path(workdir).glob("callgrind.out.*"):
            text = dump.read_text(errors="replace")
            label = re.search(r"^desc: Trigger: Client Request: (\S+)", text, re.MULTILINE)
            total = re.search(r"^totals: (\d+)", text, re.MULTILINE)
            if label and total and label.group(1).endswith(":counted"):
                counts[label.group(1).removesuffix(":counted")] = int(total.group(1))
        return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("legacy", "modern"), default="legacy")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument(
        "--servers", default=",".join(SERVERS), help="a comma-separated subset of " + ", ".join(SERVERS)
    )
    parser.add_argument(
        "--logs",
        choices=("production", "off"),
        default="production",
        help="production: JSON at INFO through the queue, as deployed (the writer thread's "
        "instructions count too); off: nothing logged",
    )
    parser.add_argument("--inside", help=argparse.SUPPRESS)  # the shim's path, when run by valgrind
    arguments = parser.parse_args()
    names = [name for name in arguments.servers.split(",") if name]
    if unknown := set(names) - set(SERVERS):
        parser.error(f"unknown servers: {', '.join(sorted(unknown))}")
    if arguments.inside:
        if arguments.logs == "production":  # as `serve` sets it up; the lines go nowhere
            from service.logging_setup import configure_logging

            configure_logging("INFO", "json", open(os.devnull, "w"))  # noqa: SIM115 - for the process's life
        asyncio.run(count_windows(ctypes.CDLL(arguments.inside), arguments.mode, arguments.calls, names))
        return
    counts = run_under_valgrind(arguments)
    # profile_call.measure's warm-up calls fall inside the counted window too.
    calls = arguments.calls + profile_call.WARMUP_CALLS
    per_call = {name: counts[name] / calls for name in names if name in counts}
    first = per_call[names[0]]
    print(f"instructions per tools/call ({arguments.mode}, {arguments.calls} calls, GC off in the windows):")
    for name, value in per_call.items():
        print(f"  {name:10s} {value:12,.0f}   {value / first:6.3f}x {names[0]}")


if __name__ == "__main__":
    main()
