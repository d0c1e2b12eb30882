"""Process-wide logging for `serve`: our level for our code, quieter chatty libraries, JSON or text."""

from __future__ import annotations

import logging

from service.observability.logs import LogFormat, install

# Per-request client logs (httpx), and Alembic's context chatter on every /readyz.
QUIET_LOGGERS = ("httpx", "httpx2", "alembic.runtime.migration", "mcp.server.streamable_http_manager")


def configure_logging(level: str, log_format: LogFormat = "text") -> None:
    """One handler on the root logger, with the request context and redaction filters."""
    install(level, log_format)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))
