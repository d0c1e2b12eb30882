"""The service reaches into no private name of its dependencies that it once used (issue 27).

Each pattern is a private name of anyio, uvicorn, aiosqlite or the MCP SDK that the service used
to touch and now reaches through a public API instead; a new use fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[2] / "service"
PRIVATE_USES = re.compile(
    r"_tool_manager|\._spawn\b|claim_worker_thread|capture_signals|sched_setaffinity|\._connection\b"
    r"|\._thread\b|TaskGroup\._"
)


def test_no_private_name_of_a_dependency_is_used() -> None:
    uses = [
        f"{path.relative_to(SERVICE.parent)}:{number}: {line.strip()}"
        for path in sorted(SERVICE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if PRIVATE_USES.search(line)
    ]
    assert uses == []
