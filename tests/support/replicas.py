"""Several replicas of the service as real processes on loopback, sharing one PostgreSQL database."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import stripe

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 60.0


@dataclass
class Replica:
    name: str
    port: int
    env: dict[str, str]
    stripe_client: stripe.StripeClient
    log_path: Path | None = None
    process: asyncio.subprocess.Process | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    @property
    def stripe(self) -> stripe.StripeClient:
        return self.stripe_client

    def http(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, timeout=10.0, **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    async def start(self) -> None:
        log = self.log_path.open("ab") if self.log_path else asyncio.subprocess.DEVNULL
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "service",
            "serve",
            "--port",
            str(self.port),
            cwd=REPO_ROOT,
            env={**os.environ, **self.env},
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        if not isinstance(log, int):
            log.close()  # the child keeps its own descriptor
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STARTUP_SECONDS
        async with httpx.AsyncClient(timeout=1.0) as http:
            while True:
                assert self.process.returncode is None, f"replica {self.name} exited during start-up"
                try:
                    if (await http.get(f"{self.base_url}/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                assert loop.time() < deadline, f"replica {self.name} did not become ready"
                await asyncio.sleep(0.05)  # polling readiness, bounded by the deadline

    async def kill(self) -> None:
        """SIGKILL: no graceful anything, as when a node dies."""
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()

    async def terminate(self, grace: float = 30.0) -> int | None:
        """SIGTERM, as Kubernetes sends it; SIGKILL after `grace` seconds."""
        if self.process is None or self.process.returncode is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(grace):
                return await self.process.wait()
        except TimeoutError:
            await self.kill()
            return None


@contextlib.asynccontextmanager
async def replicas(*reps: Replica) -> Any:
    try:
        await asyncio.gather(*(replica.start() for replica in reps))
        yield reps
    finally:
        await asyncio.gather(*(replica.kill() for replica in reps))
