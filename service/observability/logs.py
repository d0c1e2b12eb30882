"""Log output for `serve`: JSON lines (production default) or text, both with the request context.

A JSON line is one object: `time` (UTC, ISO 8601), `level`, `logger`, `message`, then
`request_id`, `user_id` and `elicitation_id` when known, `trace_id` and `span_id` while an
OpenTelemetry span is current (tracing on), then any `extra=` fields of the call and `exception`
when there is one. Every line passes the redaction filter first.

The event loop never writes a line itself: `install` puts a `QueueHandler` on the root logger,
which stamps the request context on the record and queues it, and a `QueueListener` thread
redacts, formats and writes it, leaving the record as it was. The access line, one per request,
is a `ReadyRecord` (service/observability/records.py): nothing of it is rendered on the loop.
"""

from __future__ import annotations

import collections
import copy
import logging
import logging.handlers
import re
import sys
import threading
import time
from typing import Any, Literal, TextIO

from opentelemetry import trace

from service.observability import json_line
from service.observability.json_line import JsonLine
from service.observability.records import ReadyRecord
from service.observability.redaction import REDACTED, scrub, scrub_value, sensitive_key
from service.observability.request_context import current, trace_ids

LogFormat = Literal["json", "text"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"
CONTEXT_FIELDS = ("request_id", "user_id", "elicitation_id", "trace_id", "span_id")

# What every LogRecord has; anything else on a record came from `extra=`.
_STANDARD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
# Uvicorn's duplicate of its message with ANSI colours.
_IGNORED_EXTRAS = frozenset({"color_message"})


class ContextFilter(logging.Filter):
    """Copies the current request context onto the record (without overriding explicit values).
    A `ReadyRecord` brings its own (service/observability/records.py)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if type(record) is ReadyRecord:
            return True
        attributes = record.__dict__
        if attributes.get("request_id") is None:
            context = current()
            if context is not None:
                for name, known in (
                    ("request_id", context.request_id),
                    ("user_id", context.user_id),
                    ("elicitation_id", context.elicitation_id),
                ):
                    if attributes.get(name) is None:
                        attributes[name] = known
        if attributes.get("trace_id") is None:
            attributes.update(trace_ids(trace.get_current_span()))
        return True


_NOT_EXTRA = _STANDARD_ATTRS | frozenset(CONTEXT_FIELDS) | _IGNORED_EXTRAS


def extra_keys(record: logging.LogRecord) -> list[str]:
    return [key for key in record.__dict__ if key not in _NOT_EXTRA]


# Ids the service makes or checks itself (request ids: service/observability/request_context.py)
# and OpenTelemetry's hex ids: nothing in them to redact.
_CLEAN_CONTEXT_FIELDS = frozenset({"request_id", "trace_id", "span_id"})


def _message(record: logging.LogRecord) -> str:
    try:
        return scrub(record.getMessage())
    except Exception:  # a bad format string must not lose the line
        return scrub(str(record.msg))


def _exception_and_stack(
    record: logging.LogRecord, formatter: logging.Formatter
) -> tuple[str | None, str | None]:
    exception = record.exc_text
    if record.exc_info and not exception:
        exception = formatter.formatException(record.exc_info)
    return (scrub(exception) if exception else None, scrub(record.stack_info) if record.stack_info else None)


class _UtcSeconds:
    """`created` as ISO 8601 in UTC to the millisecond; the text up to the second is made once a
    second (cheaper than going through `datetime` for each line)."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return f"{self._prefix}.{int((created - second) * 1000):03d}+00:00"


class JsonFormatter(logging.Formatter):
    """One JSON object a line (service/observability/json_line.py), redacted; the record itself
    is left as it is (other handlers may still be reading it).

    A field is scrubbed and encoded as `,"name":value`; for a short string value that text is
    kept, keyed by name and value, since most values repeat from line to line (methods, paths,
    tools, outcomes, users): the next line with it costs one lookup.
    """

    MAX_KEPT_CHARS = 256
    MAX_KEPT = 4096

    def __init__(self) -> None:
        super().__init__()
        self._line = JsonLine()
        self._time = _UtcSeconds()
        self._kept: dict[tuple[str, str], str] = {}

    def format(self, record: logging.LogRecord) -> str:
        attributes = record.__dict__
        fields = []
        for name in CONTEXT_FIELDS:
            known = attributes.get(name)
            if known is not None:
                fields.append(
                    self._line.key(name) + json_line.string(str(known))
                    if name in _CLEAN_CONTEXT_FIELDS
                    else self._field(name, known if type(known) is str else str(known))
                )
        for name, item in attributes.items():
            if name not in _NOT_EXTRA_OR_LINE_KEY:
                fields.append(self._field(name, item))
        exception, stack = _exception_and_stack(record, self)
        if exception:
            fields.append(self._line.key("exception") + json_line.string(exception))
        if stack:
            fields.append(self._line.key("stack") + json_line.string(stack))
        return self._line.join(
            self._time(record.created), record.levelname, record.name, _message(record), fields
        )

    def _field(self, name: str, item: Any) -> str:
        kind = type(item)
        if kind in _SCALARS:  # nothing to scrub but the name
            return self._line.key(name) + (REDACTED_JSON if sensitive_key(name) else json_line.value(item))
        if kind is not str or len(item) > self.MAX_KEPT_CHARS:
            return self._line.key(name) + json_line.value(scrub_value(name, item))
        kept = self._kept.get((name, item))
        if kept is None:
            kept = self._line.key(name) + json_line.string(scrub_value(name, item))
            if len(self._kept) >= self.MAX_KEPT:
                self._kept.clear()
            self._kept[(name, item)] = kept
        return kept


# Keys the line itself has: an extra field of the same name is left out (context fields never
# are extras, see `extra_keys`).
_LINE_KEYS = frozenset({"time", "level", "logger", "message", "exception", "stack"})
_NOT_EXTRA_OR_LINE_KEY = _NOT_EXTRA | _LINE_KEYS
_SCALARS = frozenset({int, float, bool, type(None)})
REDACTED_JSON = json_line.string(REDACTED)


# C0 and C1 control characters: a client's text (a request path, say) with a newline or a terminal
# escape in it must not forge a log line or repaint the terminal of whoever reads the log.
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escaped(text: str) -> str:
    return _CONTROL_CHARACTERS.sub(lambda found: f"\\x{ord(found.group()):02x}", text)


class TextFormatter(logging.Formatter):
    """TEXT_FORMAT, redacted, with the traceback or stack on the following lines."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        request_id = _escaped(str(record.__dict__.get("request_id") or "-"))
        message = _escaped(_message(record))
        text = f"{self.formatTime(record)} {record.levelname} {record.name} [{request_id}]: {message}"
        for more in _exception_and_stack(record, self):
            if more:
                text += "\n" + more
        return text


def _formatter(log_format: LogFormat) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


def build_handler(log_format: LogFormat, stream: TextIO | None = None) -> logging.Handler:
    """A stream handler with the context filter and the chosen (redacting) format; it writes in
    the thread that logs (tests read it synchronously; `install` writes from a thread)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(_formatter(log_format))
    return handler


class _Enqueue(logging.handlers.QueueHandler):
    """Queues a copy of the record with its message and traceback already rendered: its arguments
    may change once the call returns, and its traceback would keep the caller's frames alive. A
    `ReadyRecord` holds only immutable values: it is queued as it is, and rendered by the writer."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        if type(record) is ReadyRecord:
            return record
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


class LineWriter:
    """The thread that writes the queued records out, in batches (the queue of `install`).

    Handing each record to a waiting thread costs more than formatting it: the loop's thread wakes
    the writer, and the two then trade the interpreter lock for every line. Here records go on a
    deque (appending takes no lock and wakes no one), and the writer wakes every FLUSH_SECONDS,
    or as soon as HIGH_WATER records wait, formats what is there and writes it with one `write`
    and one `flush` per BATCH lines. The write lets the interpreter lock go, so the event loop
    waits at most for one batch's formatting; BATCH is kept small for that. (Offering the lock
    back after every line instead made the two threads trade it a dozen times per logged request:
    docs/adr/0008-measured-choices.md.) Past CAPACITY waiting records (a stream that stopped
    taking lines) new records are dropped and counted, and the count is logged once the writer
    catches up.
    """

    FLUSH_SECONDS = 0.05
    HIGH_WATER = 256
    BATCH = 16
    CAPACITY = 20_000

    def __init__(self, stream: TextIO, formatter: logging.Formatter) -> None:
        self.stream = stream
        self.formatter = formatter
        self._records: collections.deque[logging.LogRecord] = collections.deque()
        self._wake = threading.Event()
        self._stopping = False
        self._dropped = 0
        self._writing = threading.Thread(target=self._run, name="log-writer", daemon=True)

    def put_nowait(self, record: logging.LogRecord) -> None:
        """What `QueueHandler` calls, from any thread."""
        waiting = len(self._records)
        if waiting >= self.CAPACITY:
            self._dropped += 1
            return
        self._records.append(record)
        if waiting >= self.HIGH_WATER and not self._wake.is_set():
            self._wake.set()

    def start(self) -> None:
        self._writing.start()

    def stop(self) -> None:
        """Write out what is queued and end the thread."""
        if not self._writing.is_alive():
            return
        self._stopping = True
        self._wake.set()
        self._writing.join()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.FLUSH_SECONDS)
            self._wake.clear()
            stopping = self._stopping  # read before draining: what comes after is written at stop
            self._drain()
            if stopping:
                self._drain()
                return

    def _drain(self) -> None:
        records = self._records
        while records:
            lines = []
            for _ in range(min(self.BATCH, len(records))):
                record = records.popleft()
                try:
                    lines.append(self.formatter.format(record))
                except Exception:  # one bad record must not stop the writer
                    _ERROR_REPORTER.handleError(record)
            if self._dropped:
                dropped, self._dropped = self._dropped, 0
                lines.append(self.formatter.format(_dropped_record(dropped)))
            if lines:
                self._write(lines)

    def _write(self, lines: list[str]) -> None:
        try:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        except Exception:  # a closed or broken stream: reported on stderr, as logging does
            _ERROR_REPORTER.handleError(_dropped_record(len(lines)))


_ERROR_REPORTER = logging.Handler()


def _dropped_record(count: int) -> logging.LogRecord:
    return logging.LogRecord(
        "service.logging",
        logging.WARNING,
        "",
        0,
        "%d log lines dropped: the log stream fell behind",
        (count,),
        None,
    )


def install(level: str, log_format: LogFormat, stream: TextIO | None = None) -> LineWriter:
    """Replace the root logger's handlers with a queue, and start the thread that writes it out;
    returns that writer, which the caller stops (writing what is still queued) at exit."""
    writer = LineWriter(stream or sys.stderr, _formatter(log_format))
    enqueue = _Enqueue(writer)  # type: ignore[arg-type]  # a queue as far as QueueHandler goes
    enqueue.addFilter(ContextFilter())  # the request context lives in the logging task, not the thread
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(enqueue)
    root.setLevel(level)
    writer.start()
    return writer
