"""`configure_logging`: the event loop only queues records; a thread of its own writes the lines."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from service.logging_setup import configure_logging, stop_logging
from service.observability.logs import JsonFormatter, LineWriter, build_handler
from service.observability.records import emit
from service.observability.request_context import enter_child, leave


class WriterThreads(io.StringIO):
    """A stream that remembers which threads wrote to it."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[threading.Thread] = set()

    def write(self, text: str) -> int:
        self.threads.add(threading.current_thread())
        return super().write(text)


@pytest.fixture
def root_logger_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        stop_logging()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)


@pytest.mark.usefixtures("root_logger_restored")
async def test_lines_are_written_off_the_event_loop_with_context_and_traceback() -> None:
    stream = WriterThreads()
    configure_logging("INFO", "json", stream)
    logger = logging.getLogger("service.test")
    context, token = enter_child()
    try:
        logger.info("hello %s", "world", extra={"answer": 42})
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("it failed, token=%s", "secret_token_value_123456")
    finally:
        leave(token)
    stop_logging()  # writes out what is queued
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == ["hello world", "it failed, token=[REDACTED]"]
    assert lines[0]["answer"] == 42
    assert all(line["request_id"] == context.request_id for line in lines)
    assert "ValueError: boom" in lines[1]["exception"]
    assert stream.threads and threading.current_thread() not in stream.threads


@pytest.mark.usefixtures("root_logger_restored")
async def test_an_access_line_is_queued_as_it_is_and_rendered_by_the_writer() -> None:
    stream = WriterThreads()
    configure_logging("INFO", "json", stream)
    logger = logging.getLogger("service.test.access")
    queued: list[logging.LogRecord] = []

    def queue(record: logging.LogRecord) -> bool:
        queued.append(record)
        return True

    logger.addFilter(queue)
    try:
        emit(
            logger,
            logging.INFO,
            "%s %s %s",
            ("POST", "/mcp", 200),
            {"request_id": "r1", "user_id": None, "http_status": 200, "ids": ("a", "b")},
        )
    finally:
        logger.filters.clear()
    stop_logging()
    [line] = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert line["message"] == "POST /mcp 200" and line["request_id"] == "r1"
    assert line["http_status"] == 200 and line["ids"] == ["a", "b"] and "user_id" not in line
    [record] = queued
    assert record.args == ("POST", "/mcp", 200), "the writer formats without changing the record"
    assert threading.current_thread() not in stream.threads


def test_formatting_leaves_the_record_as_it_was() -> None:
    stream = io.StringIO()
    handler = build_handler("json", stream)
    record = logging.LogRecord("service.test", logging.INFO, "", 0, "token=%s", ("secret_value_123",), None)
    handler.handle(record)
    assert "secret_value_123" not in stream.getvalue()
    assert record.msg == "token=%s" and record.args == ("secret_value_123",)


class HeldStream(io.StringIO):
    """A stream whose first write waits until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def write(self, text: str) -> int:
        self.entered.set()
        assert self.release.wait(10), "the test never released the stream"
        return super().write(text)


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("service.test", logging.INFO, "", 0, message, None, None)


def test_a_stream_that_stops_taking_lines_drops_new_ones_and_says_how_many() -> None:
    stream = HeldStream()
    writer = LineWriter(stream, JsonFormatter())
    writer.CAPACITY = 10
    writer.start()
    try:
        writer.put_nowait(record("first"))
        assert stream.entered.wait(10), "the writer never wrote"
        for index in range(writer.CAPACITY + 5):
            writer.put_nowait(record(f"queued {index}"))
    finally:
        stream.release.set()
        writer.stop()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == [
        "first",
        *(f"queued {index}" for index in range(writer.CAPACITY)),
        "5 log lines dropped: the log stream fell behind",
    ]


def test_lines_keep_their_order_across_batches_and_all_are_written_at_stop() -> None:
    stream = io.StringIO()
    writer = LineWriter(stream, JsonFormatter())
    writer.start()
    count = writer.HIGH_WATER * 3 + 7
    for index in range(count):
        writer.put_nowait(record(str(index)))
    writer.stop()
    assert [json.loads(line)["message"] for line in stream.getvalue().splitlines()] == [
        str(index) for index in range(count)
    ]


class CountedWrites(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_a_batch_is_formatted_without_handing_the_lock_back_line_by_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Yielding after every line made the writer and the event loop trade the interpreter lock a
    # dozen times per logged request; a batch lets it go once, in its write.
    yields: list[float] = []
    monkeypatch.setattr(time, "sleep", yields.append)  # the module service.observability.logs calls
    stream = CountedWrites()
    writer = LineWriter(stream, JsonFormatter())
    count = writer.BATCH * 2 + 3
    for index in range(count):
        writer.put_nowait(record(str(index)))
    writer._drain()  # the writer thread's work, here in the test's thread
    assert len(stream.getvalue().splitlines()) == count
    assert stream.writes == 3 and yields == []


def test_fields_may_not_overwrite_the_record_itself() -> None:
    logger = logging.getLogger("service.test.reserved")
    with pytest.raises(KeyError, match="msg"):
        emit(logger, logging.INFO, "m", (), {"msg": "overwritten", "fine": 1})


@pytest.mark.usefixtures("root_logger_restored")
def test_client_libraries_do_not_log_each_request_at_info() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", stream)
    for name in ("stripe", "httpx"):
        logging.getLogger(name).info("Request to Stripe api")  # what stripe-python logs per call
        logging.getLogger(name).warning("kept")
    stop_logging()
    assert [json.loads(line)["message"] for line in stream.getvalue().splitlines()] == ["kept", "kept"]
