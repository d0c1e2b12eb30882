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

from tests.support.polling import until
from tests.support.servers import ReservedPort

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 60.0


@dataclass
class Replica:
    """`python -m service serve` on a port the test reserved: no other process takes it, also
    between a kill and a restart."""

    name: str
    reserved: ReservedPort
    env: dict[str, str]
    stripe_client: stripe.StripeClient
    log_path: Path | None = None
    process: asyncio.subprocess.Process | None = None

    @property
    def port(self) -> int:
        return self.reserved.port

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
        listener = self.reserved.listener()
        log = self.log_path.open("ab") if self.log_path else asyncio.subprocess.DEVNULL
        try:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "service",
                "serve",
                "--fd",
                str(listener.fileno()),
                pass_fds=(listener.fileno(),),
                cwd=REPO_ROOT,
                env={**os.environ, **self.env},
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        finally:
            if not isinstance(log, int):
                log.close()  # the child keeps its own descriptor
            # The child serves on its own copy. Closing this one lets the port refuse connections
            # once the child exits, as a dead node's would, instead of queueing them here.
            listener.close()
        process = self.process
        async with httpx.AsyncClient(timeout=1.0) as http:

            async def ready() -> bool:
                assert process.returncode is None, f"replica {self.name} exited during start-up"
                try:
                    return (await http.get(f"{self.base_url}/readyz")).status_code == 200
                except httpx.TransportError:
                    return False

            await until(ready, f"replica {self.name} ready", STARTUP_SECONDS)

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
