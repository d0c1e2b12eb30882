"""Servers the service starts inside itself (the embedded Stripe sandbox, a metrics port) leave
uvicorn's loggers alone, so the main server's records keep the process's level and format."""

from __future__ import annotations

import logging

from tests.support.service import run_service


def uvicorn_loggers() -> dict[str, tuple[int, list[logging.Handler], bool]]:
    names = ("uvicorn", "uvicorn.error", "uvicorn.access")
    return {
        name: (
            logging.getLogger(name).level,
            list(logging.getLogger(name).handlers),
            logging.getLogger(name).propagate,
        )
        for name in names
    }


async def test_in_process_servers_leave_uvicorns_loggers_as_configured(database_url: str) -> None:
    before = uvicorn_loggers()
    async with run_service(database_url, metrics_enabled=True, metrics_port=0) as running:
        assert running.runtime.sandbox is not None  # the embedded sandbox's server is running
        during = uvicorn_loggers()
    assert during == before
