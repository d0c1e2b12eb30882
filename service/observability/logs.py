"""Log output for `serve`: JSON lines (production default) or text, both with the request context.

A JSON line is one object: `time` (UTC, ISO 8601), `level`, `logger`, `message`, then
`request_id`, `user_id` and `elicitation_id` when known, `trace_id` and `span_id` while an
OpenTelemetry span is current (tracing on), then any `extra=` fields of the call and `exception`
when there is one. Every line passes the redaction filter first.

The event loop never writes a line itself: `install` puts a `QueueHandler` on the root logger,
which stamps the request context on the record and queues it, and a `QueueListener` thread
redacts, formats and writes it.
"""

from __future__ import annotations

import copy
import json
import logging
import logging.handlers
import queue
import sys
import time
from typing import Any, Literal, TextIO

from opentelemetry import trace

from service.observability.redaction import scrub, scrub_value
from service.observability.request_context import current

LogFormat = Literal["json", "text"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"
CONTEXT_FIELDS = ("request_id", "user_id", "elicitation_id", "trace_id", "span_id")

# What every LogRecord has; anything else on a record came from `extra=`.
_STANDARD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
# Uvicorn's duplicate of its message with ANSI colours.
_IGNORED_EXTRAS = frozenset({"color_message"})


class ContextFilter(logging.Filter):
    """Copies the current request context onto the record (without overriding explicit values)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = current()
        known = context.fields() if context is not None else {}
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            known["trace_id"] = trace.format_trace_id(span.trace_id)
            known["span_id"] = trace.format_span_id(span.span_id)
        for name in CONTEXT_FIELDS:
            if getattr(record, name, None) is None:
                setattr(record, name, known.get(name))
        return True


class RedactionFilter(logging.Filter):
    """Scrubs the formatted message, its extra fields and its traceback, in place."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the line
            message = str(record.msg)
        record.msg, record.args = scrub(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        record.exc_info = None
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        for key in [*extra_keys(record), *CONTEXT_FIELDS]:
            value = getattr(record, key, None)
            if value is not None:
                setattr(record, key, scrub(value) if key in CONTEXT_FIELDS else scrub_value(key, value))
        return True


def extra_keys(record: logging.LogRecord) -> list[str]:
    return [
        key
        for key in record.__dict__
        if key not in _STANDARD_ATTRS and key not in CONTEXT_FIELDS and key not in _IGNORED_EXTRAS
    ]


# One encoder for every line: `json.dumps` with options builds a new encoder on each call.
_encode = json.JSONEncoder(ensure_ascii=False, default=str).encode


def _utc_time(created: float) -> str:
    """`created` as ISO 8601 in UTC, to the millisecond (cheaper than going through `datetime`)."""
    seconds = int(created)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        + f".{int((created - seconds) * 1000):03d}+00:00"
    )


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _utc_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        for key in extra_keys(record):
            line.setdefault(key, getattr(record, key))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return _encode(line)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "request_id", None) is None:
            record.request_id = "-"
        return super().format(record)


def build_handler(log_format: LogFormat, stream: TextIO | None = None) -> logging.Handler:
    """A stream handler with the context and redaction filters and the chosen format; it writes
    in the thread that logs (tests read it synchronously; `install` writes from a thread)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactionFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else _TextFormatter(TEXT_FORMAT))
    return handler


class _Enqueue(logging.handlers.QueueHandler):
    """Queues a copy of the record with its message and traceback already rendered: its arguments
    may change once the call returns, and its traceback would keep the caller's frames alive."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        queued = copy.copy(record)
        try:
            queued.msg = record.getMessage()
        except Exception:  # a bad format string must not lose the line
            queued.msg = str(record.msg)
        queued.args = None
        if record.exc_info:
            if not record.exc_text:
                queued.exc_text = _traceback_formatter.formatException(record.exc_info)
            queued.exc_info = None
        return queued


_traceback_formatter = logging.Formatter()


def install(
    level: str, log_format: LogFormat, stream: TextIO | None = None
) -> logging.handlers.QueueListener:
    """Replace the root logger's handlers with a queue, and start the thread that writes it out;
    returns that listener, which the caller stops (writing what is still queued) at exit."""
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    enqueue = _Enqueue(records)
    enqueue.addFilter(ContextFilter())  # the request context lives in the logging task, not the thread
    writer = logging.StreamHandler(stream or sys.stderr)
    writer.addFilter(RedactionFilter())
    writer.setFormatter(JsonFormatter() if log_format == "json" else _TextFormatter(TEXT_FORMAT))
    listener = logging.handlers.QueueListener(records, writer)
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(enqueue)
    root.setLevel(level)
    listener.start()
    return listener
