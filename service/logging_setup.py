"""Process-wide logging for `serve`: our level for our code, quieter chatty libraries."""

from __future__ import annotations

import logging

# Per-request client logs (httpx), and Alembic's context chatter on every /readyz.
QUIET_LOGGERS = ("httpx", "httpx2", "alembic.runtime.migration", "mcp.server.streamable_http_manager")


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))
