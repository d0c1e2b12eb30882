"""Log output for `serve`: JSON lines (production default) or text, both with the request context.

A JSON line is one object: `time` (UTC, ISO 8601), `level`, `logger`, `message`, then
`request_id`, `user_id` and `elicitation_id` when known, then any `extra=` fields of the call and
`exception` when there is one. Every line passes the redaction filter first.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from service.observability.redaction import scrub, scrub_value
from service.observability.request_context import current

LogFormat = Literal["json", "text"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"
CONTEXT_FIELDS = ("request_id", "user_id", "elicitation_id")

# What every LogRecord has; anything else on a record came from `extra=`.
_STANDARD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
# Uvicorn's duplicate of its message with ANSI colours.
_IGNORED_EXTRAS = frozenset({"color_message"})


class ContextFilter(logging.Filter):
    """Copies the current request context onto the record (without overriding explicit values)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = current()
        known = context.fields() if context is not None else {}
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


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
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
        return json.dumps(line, default=str, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "request_id", None) is None:
            record.request_id = "-"
        return super().format(record)


def build_handler(log_format: LogFormat, stream: TextIO | None = None) -> logging.Handler:
    """A stream handler with the context and redaction filters and the chosen format."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactionFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else _TextFormatter(TEXT_FORMAT))
    return handler


def install(level: str, log_format: LogFormat, stream: TextIO | None = None) -> logging.Handler:
    """Replace the root logger's handlers with ours; returns the handler."""
    handler = build_handler(log_format, stream)
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
