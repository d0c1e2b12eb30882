"""What the property-based fuzz tests share: the real service on a thread of its own (hypothesis
drives synchronous tests), a raw HTTP/1.1 client that sends any bytes, the app's route table, and
the checks every answer must pass.

The client speaks HTTP itself because httpx refuses (rightly) to send most of what a stranger can:
non-ASCII or NUL bytes in a path or header, invalid percent escapes, odd methods.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from starlette.routing import BaseRoute, Mount

from tests.support.browserless import csrf_token, log_in_through_form
from tests.support.service import DEFAULT_PASSWORD, RunningService, run_service

T = TypeVar("T")

# How long one answer may take before the test calls it a hang. Generous for a loaded 2-core CI
# box: every answer here comes in milliseconds, and the test fails rather than waits forever.
ANSWER_WITHIN_SECONDS = float(__import__("os").environ.get("FUZZ_ANSWER_SECONDS", "30"))
STARTUP_WITHIN_SECONDS = 60.0
MAX_ANSWER_BYTES = 4 << 20  # nothing this service answers is near it; a runaway body is a failure

# Limits that would otherwise stop a fuzzer at the first few examples, before the code behind
# them: each is tested on its own elsewhere (tests/integration/identity, bounds).
FUZZ_OVERRIDES: dict[str, Any] = {
    "oauth_registrations_per_address_per_hour": 100_000,
    "oidc_callbacks_per_address_per_hour": 100_000,
    "sign_in_account_failures": 1000,
    "sign_in_ip_failures": 10_000,
    "max_elicitations_per_hour": 100_000,
}


class ThreadedService:
    """`run_service` on its own thread and event loop, so synchronous hypothesis tests can use it;
    `run` runs a coroutine on that loop (to make users, tokens, rows through the service itself)."""

    def __init__(self, database_url: str, **overrides: Any) -> None:
        self._database_url = database_url
        self._overrides = {**FUZZ_OVERRIDES, **overrides}
        self._runner = asyncio.Runner()  # closing it cancels what is left, as asyncio.run does
        self._loop = self._runner.get_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._service: RunningService | None = None
        self._thread = threading.Thread(target=self._main, name="fuzzed-service", daemon=True)

    @property
    def service(self) -> RunningService:
        assert self._service is not None
        return self._service

    @property
    def port(self) -> int:
        return int(self.service.base_url.rsplit(":", 1)[1])

    def _main(self) -> None:
        try:
            self._runner.run(self._serve())
        except BaseException as exc:  # reported by __enter__ or __exit__
            self._failure = exc
        finally:
            self._ready.set()
            self._runner.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with run_service(self._database_url, **self._overrides) as service:
            self._service = service
            self._ready.set()
            await self._stop.wait()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(work, self._loop)
        return future.result(timeout=ANSWER_WITHIN_SECONDS)

    def __enter__(self) -> ThreadedService:
        self._thread.start()
        assert self._ready.wait(STARTUP_WITHIN_SECONDS), "the service did not start"
        if self._failure is not None:
            raise RuntimeError("the service failed to start") from self._failure
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=STARTUP_WITHIN_SECONDS)
        assert not self._thread.is_alive(), "the service did not stop"
        if self._failure is not None and exc == (None, None, None):
            raise RuntimeError("the service failed") from self._failure


@dataclass(frozen=True)
class Credentials:
    """A signed-in user's ways in: a personal access token and a browser session's cookies."""

    username: str
    user_id: str
    token: str
    cookies: dict[str, str]
    csrf_token: str

    @property
    def cookie_header(self) -> str:
        return "; ".join(f"{name}={value}" for name, value in self.cookies.items())


def sign_in(running: ThreadedService, username: str) -> Credentials:
    """A user with a personal access token and a signed-in browser (its session and CSRF cookies)."""
    service = running.service
    user = running.run(service.add_user(username))
    token = running.run(service.personal_token(username)).secret

    async def browser_cookies() -> tuple[dict[str, str], str]:
        async with service.http() as browser:
            form = csrf_token((await browser.get("/login")).text)  # the CSRF cookie's token
            done = await log_in_through_form(browser, "/login", username, DEFAULT_PASSWORD)
            assert done.status_code == 303, done.text
            assert "signed in as" in (await browser.get("/account")).text
            return dict(browser.cookies.items()), form

    cookies, csrf = running.run(browser_cookies())
    return Credentials(username, user.id, token, cookies, csrf)


# --- the route table -------------------------------------------------------------------------


@dataclass(frozen=True)
class RouteInfo:
    template: str  # "/pay/{elicitation_id}"
    methods: frozenset[str]  # empty: any method (an ASGI app such as /mcp)


def _walk(routes: list[BaseRoute], prefix: str) -> Iterator[RouteInfo]:
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's include_router
        if included is not None:
            yield from _walk(list(included.routes), prefix)
            continue
        if isinstance(route, Mount):
            inner = getattr(route.app, "app", route.app)  # a LateBoundApp holds its app when running
            routes_inside = getattr(inner, "routes", None)
            if routes_inside is not None:
                yield from _walk(list(routes_inside), prefix + route.path)
            else:  # a static directory: any path under it
                yield RouteInfo(prefix + route.path + "/{path}", frozenset({"GET", "HEAD"}))
            continue
        path = getattr(route, "path", None)
        if path is not None:
            yield RouteInfo(prefix + path, frozenset(getattr(route, "methods", None) or ()))


def route_table(app: FastAPI) -> list[RouteInfo]:
    """Every (path template, methods) the running app serves, including the SDK's routes mounted
    at `/`, merged by template; sorted, so generated examples do not depend on dict order."""
    merged: dict[str, set[str]] = {}
    for info in _walk(list(app.routes), ""):
        merged.setdefault(info.template, set()).update(info.methods)
    return [RouteInfo(template, frozenset(methods)) for template, methods in sorted(merged.items())]


PARAMETER = re.compile(r"\{([^}:]+)(:[^}]+)?\}")


def fill_template(template: str, values: list[bytes]) -> bytes:
    """The template with each `{name}` replaced by the next raw value (bytes, sent as they are)."""
    parts = PARAMETER.split(template)
    out = bytearray()
    supply = iter(values)
    # re.split with two groups yields: text, name, converter, text, name, converter, ...
    for index, part in enumerate(parts):
        if index % 3 == 0:
            out += part.encode()
        elif index % 3 == 1:
            out += next(supply, b"x")
    return bytes(out)


def parameter_count(template: str) -> int:
    return len(PARAMETER.findall(template))


# --- the raw client --------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    streaming: bool = False  # an event stream left open: only its head was read

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name.lower():
                return value
        return None

    def __repr__(self) -> str:
        return f"Answer({self.status}, {self.body[:300]!r})"


@dataclass
class RawRequest:
    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""

    def encode(self, port: int) -> bytes:
        lines = [self.method + b" " + self.target + b" HTTP/1.1", b"Host: 127.0.0.1:%d" % port]
        lines += [name + b": " + value for name, value in self.headers]
        lines += [b"Connection: close", b"Content-Length: %d" % len(self.body)]
        return b"\r\n".join(lines) + b"\r\n\r\n" + self.body

    def __repr__(self) -> str:  # hypothesis prints it with a failure: keep it readable
        headers = ", ".join(f"{name!r}: {value[:200]!r}" for name, value in self.headers)
        return (
            f"RawRequest({self.method!r} {self.target[:300]!r} [{len(self.target)}], "
            f"headers=[{headers}], body={self.body[:300]!r} [{len(self.body)}])"
        )


class Hang(AssertionError):
    """No complete answer within ANSWER_WITHIN_SECONDS."""


def _recv_until(sock: socket.socket, buffer: bytearray, marker: bytes) -> int:
    while (index := buffer.find(marker)) < 0:
        chunk = sock.recv(65536)
        if not chunk:
            return -1
        buffer += chunk
        assert len(buffer) <= MAX_ANSWER_BYTES, "answer head too large"
    return index


def _read_to_end(
    sock: socket.socket, buffer: bytearray, asked: ServerRequest | None = None, *, chunked: bool = False
) -> None:
    heard: set[str] = set()  # the server's requests already passed on, by id
    while True:
        # What came with the head counts too: a request may have arrived with it.
        if asked is not None:
            so_far = _dechunk(bytes(buffer)) if chunked else bytes(buffer)
            for message in _sse_messages(so_far, complete_only=True):
                if isinstance(message, dict) and "method" in message and "id" in message:
                    key = json.dumps(message["id"])
                    if key not in heard:
                        heard.add(key)
                        asked(message)
        chunk = sock.recv(65536)
        if not chunk:
            return
        buffer += chunk
        assert len(buffer) <= MAX_ANSWER_BYTES, "answer body too large"


def _is_event_stream(answer: Answer) -> bool:
    return (answer.header("content-type") or "").startswith("text/event-stream")


def _sse_messages(body: bytes, *, complete_only: bool = False) -> list[Any]:
    """The JSON messages of an event stream's `data:` lines (of complete events only, if asked)."""
    text = body.replace(b"\r\n", b"\n")
    if complete_only:
        text = text[: text.rfind(b"\n\n") + 1]
    messages: list[Any] = []
    for line in text.split(b"\n"):
        if line.startswith(b"data:") and line[5:].strip():
            try:
                parsed = json.loads(line[5:])
            except ValueError:
                continue
            messages.extend(parsed if isinstance(parsed, list) else [parsed])
    return messages


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    rest = data
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";", 1)[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        rest = rest[size + 2 :]
    return bytes(out)


ServerRequest = Callable[[dict[str, Any]], None]


def send(
    port: int, request: RawRequest, *, stream: bool = False, asked: ServerRequest | None = None
) -> Answer:
    """Sends `request` on a fresh connection and reads the whole answer (`Connection: close`). An
    event stream a GET opened, or any other when `stream` says it stays open by design (an MCP
    `subscriptions/listen`), is not read past its head. `asked` hears each JSON-RPC request the
    server sends on an event stream as it arrives (an `elicitation/create` the call waits on), so
    it can answer before the stream goes on."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN_SECONDS) as sock:
            # The server may answer and close before reading everything: read that answer.
            with suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(request.encode(port))
            buffer = bytearray()
            end = _recv_until(sock, buffer, b"\r\n\r\n")
            assert end >= 0, f"connection closed without an answer: {bytes(buffer[:200])!r}"
            head = bytes(buffer[:end]).decode("latin-1").split("\r\n")
            status = int(head[0].split(" ", 2)[1])
            headers = []
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers.append((name.strip().lower(), value.strip()))
            answer = Answer(status, headers, b"")
            body = buffer[end + 4 :]
            chunked = answer.header("transfer-encoding") == "chunked"
            if (request.method == b"GET" or stream) and _is_event_stream(answer):
                answer.streaming = True
                return answer
            if request.method != b"HEAD" and status not in (204, 304):
                with suppress(ConnectionResetError):
                    _read_to_end(sock, body, asked if _is_event_stream(answer) else None, chunked=chunked)
            if chunked:
                answer.body = _dechunk(bytes(body))
            else:
                answer.body = bytes(body)
            return answer
    except TimeoutError as exc:
        raise Hang(f"no answer within {ANSWER_WITHIN_SECONDS} s to {request!r}") from exc


# --- what every answer must be ---------------------------------------------------------------


def check_answer(request: RawRequest, answer: Answer) -> None:
    """Never a server error; a refusal says what was wrong (a body, or a Location to follow)."""
    assert answer.status < 500, f"{answer!r} to {request!r}"
    if 400 <= answer.status < 500 and request.method != b"HEAD":
        assert answer.body.strip(), f"a {answer.status} without a message, to {request!r}"
    for message in json_rpc_messages(answer):
        error = message.get("error") if isinstance(message, dict) else None
        # -32603 is the SDK's "Internal error": an exception escaped a handler.
        assert not (isinstance(error, dict) and error.get("code") == -32603), f"{answer!r} to {request!r}"


def send_and_check(
    port: int,
    errors: ErrorLog,
    request: RawRequest,
    *,
    stream: bool = False,
    asked: ServerRequest | None = None,
) -> Answer:
    """Sends `request` (see `send`) and checks its answer, and that the server logged no error."""
    answer = send(port, request, stream=stream, asked=asked)
    logged = errors.take()
    check_answer(request, answer)
    assert logged == [], request
    return answer


def json_rpc_messages(answer: Answer) -> list[Any]:
    """The JSON-RPC messages of a JSON or SSE answer from /mcp (empty for anything else)."""
    if _is_event_stream(answer):
        return _sse_messages(answer.body)
    if not (answer.header("content-type") or "").startswith("application/json"):
        return []
    try:
        parsed = json.loads(answer.body)
    except ValueError:
        return []
    return parsed if isinstance(parsed, list) else [parsed]


class ErrorLog(logging.Handler):
    """Every record at ERROR or above, or carrying a traceback, logged while it is installed."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock_records = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            with self._lock_records:
                self.records.append(record)

    def take(self) -> list[str]:
        with self._lock_records:
            taken, self.records = self.records, []
        return [f"{record.name}: {record.getMessage()}" + _traceback(record) for record in taken]


def _traceback(record: logging.LogRecord) -> str:
    if not record.exc_info:
        return ""
    return "\n" + logging.Formatter().formatException(record.exc_info)


@contextmanager
def error_log() -> Iterator[ErrorLog]:
    handler = ErrorLog()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "0"))

# The service runs in this process, on another thread, and draws its request ids from `random`:
# hypothesis sees the global state move while it generates an example and would call it flaky.
QUIET_ABOUT_RANDOM = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies:hypothesis.errors.HypothesisDeprecationWarning"
)


def fuzz_settings(examples: int) -> settings:
    """`examples` derandomized examples (`FUZZ_EXAMPLES` and `FUZZ_RANDOM=1` search harder by hand)."""
    return settings(
        max_examples=EXAMPLES or examples,
        derandomize=os.environ.get("FUZZ_RANDOM") != "1",
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
