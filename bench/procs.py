"""Child processes (servers, generators), each in its own process group, all ended on exit or Ctrl-C."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from service.web.background_server import bind_loopback
from service.web.background_server import port_of as port_of  # re-exported: the drivers call procs.port_of

ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 5.0
GENERATOR_TIMEOUT_MARGIN = 90.0
GC_READING_TIMEOUT = 5.0
# First on the bare servers' PYTHONPATH: a `sniffio` that fails to import (see the module).
WITHOUT_SNIFFIO = os.pathsep.join(
    filter(None, [str(ROOT / "bench" / "without_sniffio"), os.environ.get("PYTHONPATH")])
)

_children: list[subprocess.Popen[Any]] = []


def _stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)  # the child's own group: it and nothing else
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT)


def stop_all() -> None:
    while _children:
        _stop(_children.pop())


def _on_signal(signum: int, _frame: Any) -> None:
    stop_all()
    raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)


def install_cleanup() -> None:
    atexit.register(stop_all)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def spawn(args: list[str], *, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[Any]:
    process = subprocess.Popen(
        args, cwd=ROOT, env={**os.environ, **(env or {})}, start_new_session=True, **kwargs
    )
    _children.append(process)
    return process


def forget(process: subprocess.Popen[Any]) -> None:
    _stop(process)
    if process in _children:
        _children.remove(process)


def listener() -> socket.socket:
    """A loopback socket bound to a port the kernel picks, for `start_server` to hand down: held
    from now on, so no other process can take the port before the server listens on it."""
    return bind_loopback()


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[Any]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError(f"{self.name}: no VmRSS")

    def gc_reading(self) -> dict[str, Any]:
        """The server's collector totals now (`bench/gc_probe.py`): signal it, wait for its answer."""
        path = gc_probe_path(self.log)
        last = json.loads(path.read_text())["seq"] if path.exists() else 0
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + GC_READING_TIMEOUT
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                reading: dict[str, Any] = json.loads(path.read_text())
                if reading["seq"] > last:
                    return reading
            time.sleep(0.005)
        raise TimeoutError(f"{self.name} did not answer the collector probe within {GC_READING_TIMEOUT}s")


def gc_probe_path(log: Path) -> Path:
    """Where a server started with `log` writes its collector readings (`bench/gc_probe.py`)."""
    return log.with_suffix(".gc.json")


def start_server(name: str, sock: socket.socket, env: dict[str, str], logdir: Path) -> Server:
    """On `sock` (from `listener`, handed down and closed here), one process, no reload: our service
    (BENCH_KIND=paid) as `serve --fd` starts it (`bench/paid_serve.py`), the others as uvicorn runs
    `bench.servers:create` (`python -m bench.servers`)."""
    port = port_of(sock)
    log = logdir / f"{name}.log"
    handle: IO[bytes] = log.open("wb")
    paid = env.get("BENCH_KIND") == "paid"
    module = "bench.paid_serve" if paid else "bench.servers"
    # Our service serves /metrics on a port of its own, as deployed: a second socket handed down.
    sockets = [sock, listener()] if paid else [sock]
    environment = {
        **env,
        "BENCH_PORT": str(port),
        "BENCH_FD": str(sock.fileno()),
        "BENCH_GC_PROBE": str(gc_probe_path(log)),
    }
    if paid:
        environment["BENCH_METRICS_FD"] = str(sockets[1].fileno())
    try:
        process = spawn(
            [sys.executable, "-m", module],
            env=environment,
            stdout=handle,
            stderr=subprocess.STDOUT,
            pass_fds=tuple(each.fileno() for each in sockets),
        )
    finally:
        handle.close()
        for each in sockets:
            each.close()  # the child serves on its own copies
    return Server(name, port, process, log)


def wait_ready(server: Server) -> None:
    """Bounded: uvicorn accepts only after the lifespan started, so a connect means ready."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited at startup:\n{server.log.read_text()[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", server.port), timeout=1):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{server.name} did not start within {STARTUP_TIMEOUT}s")


def run_generator(spec: dict[str, Any]) -> dict[str, Any]:
    """One generator process for one measurement; its JSON result."""
    bound = float(spec.get("bound") or float(spec.get("duration", 0)) + float(spec.get("warmup", 0)))
    bound += GENERATOR_TIMEOUT_MARGIN
    process = spawn(
        [sys.executable, "-m", "bench.loadgen", json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=bound)
    finally:
        forget(process)
    if process.returncode != 0:
        raise RuntimeError(f"load generator failed ({process.returncode}): {err[-2000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result
