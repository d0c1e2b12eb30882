"""The service's command line as a real subprocess (`python -m service ...` from the repository root)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
COMMAND_SECONDS = 60.0


async def run_cli(
    *args: str, env: Mapping[str, str], stdin: str | None = None, unset: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Runs the command with this process's environment plus `env` (minus `unset`); async, since the
    servers it talks to often run in the test's own event loop."""
    environment = {**os.environ, **env}
    for name in unset:
        environment.pop(name, None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service",
        *args,
        cwd=REPO_ROOT,
        env=environment,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(COMMAND_SECONDS):
        out, err = await process.communicate(stdin.encode() if stdin is not None else None)
    assert process.returncode is not None
    return subprocess.CompletedProcess(list(args), process.returncode, out.decode(), err.decode())
