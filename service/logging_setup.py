"""Process-wide logging for `serve`: our level for our code, quieter chatty libraries, JSON or text."""

from __future__ import annotations

import atexit
import logging
from typing import TextIO

from service.observability.logs import LineWriter, LogFormat, install

# Per-request client logs (httpx), and Alembic's context chatter on every /readyz.
QUIET_LOGGERS = ("httpx", "httpx2", "alembic.runtime.migration", "mcp.server.streamable_http_manager")


_running: list[LineWriter] = []


def configure_logging(level: str, log_format: LogFormat = "text", stream: TextIO | None = None) -> LineWriter:
    """The root logger's records go through a queue to a writer thread, with the request context
    and redaction filters; what is queued is written out at exit (or by `stop_logging`)."""
    stop_logging()
    listener = install(level, log_format, stream)
    _running.append(listener)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    return listener


def stop_logging() -> None:
    """Write out what is queued and end the writer thread; the root logger keeps its queue."""
    while _running:
        _running.pop().stop()


atexit.register(stop_logging)
