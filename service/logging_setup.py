"""Process-wide logging for `serve`: our level for our code, quieter chatty libraries, JSON or text."""

from __future__ import annotations

import atexit
import logging
import signal
from types import FrameType
from typing import TextIO

from service.observability.logs import LineWriter, LogFormat, install

# Per-request client logs (httpx; stripe-python writes two lines per API call), and Alembic's
# context chatter on every /readyz.
QUIET_LOGGERS = (
    "httpx",
    "httpx2",
    "stripe",
    "alembic.runtime.migration",
    "mcp.server.streamable_http_manager",
)


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


def write_out_before_dying_of(*signals: signal.Signals) -> None:
    """For `serve`: uvicorn, once shut down, restores the signal handlers it found and raises the
    signal that stopped it again, and the default handler ends the process without running
    `atexit`, losing the lines still queued. This handler writes them out, then dies of the signal
    all the same (same exit status)."""

    def die(signum: int, _frame: FrameType | None) -> None:
        stop_logging()
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    for number in signals:
        signal.signal(number, die)


atexit.register(stop_logging)
