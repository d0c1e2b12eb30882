"""`configure_logging`: the event loop only queues records; a thread of its own writes the lines."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest

from service.logging_setup import configure_logging, stop_logging
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
