"""What users install, tried as a user would: run by the interpreter of a fresh venv that holds
only the built wheels (the service and its `sandbox` extra) and requirements.lock, from a
directory outside the checkout.

Migrates a new SQLite database, creates an account and a token with the console script, serves,
waits for /readyz, then calls the free tool `whoami` over MCP in both protocol eras and checks
that serverInfo names the installed version. Exits non-zero with a message on the first failure.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

SCRIPT = str(Path(sys.executable).with_name("paid-mcp-service"))
PASSWORD = "smoke-test password"  # noqa: S105 - a throwaway account in a throwaway database


def run(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run([SCRIPT, *args], input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"`paid-mcp-service {' '.join(args)}` failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(base: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the service exited with {server.returncode} before it was ready")
        try:
            answer = httpx.get(f"{base}/readyz", timeout=2)
            if answer.status_code == 200 and answer.json().get("ready") is True:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    sys.exit("the service was not ready within 60 s")


async def call_whoami(base: str, token: str, mode: str) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(f"{base}/mcp", http_client=http)
    async with http, Client(transport, mode=mode) as client:  # type: ignore[arg-type]
        info = client.server_info
        expected = version("paid-mcp-service")
        if info is None or info.version != expected:
            sys.exit(f"serverInfo.version is {info.version!r}, expected {expected!r}")
        result = await client.call_tool("whoami", {})
        text = " ".join(getattr(block, "text", "") for block in result.content)
        if result.is_error or "smoke" not in text:
            sys.exit(f"whoami ({mode}) answered {result!r}")
        print(f"whoami over MCP ({mode}, protocol {client.protocol_version}): {text}")


def main() -> None:
    workdir = Path.cwd()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    os.environ.update(
        DATABASE_URL=f"sqlite:///{workdir / 'service.db'}",
        PUBLIC_BASE_URL=base,
        STRIPE_SANDBOX_PORT="0",
        STRIPE_SANDBOX_STATE_FILE=str(workdir / "stripe-sandbox.json"),
    )
    print(run("--version").strip())
    print(run("migrate").strip())
    run("users", "create", "smoke", "--password-stdin", stdin=PASSWORD + "\n")
    token = run("tokens", "create", "smoke", "--label", "smoke test").strip()
    server = subprocess.Popen([SCRIPT, "serve", "--port", str(port)])
    try:
        wait_ready(base, server)
        print(f"{base}/readyz: ready")
        for mode in ("legacy", "auto"):  # auto negotiates 2026-07-28 through server/discover
            asyncio.run(call_whoami(base, token, mode))
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
