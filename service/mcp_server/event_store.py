"""Resumable 2025-11-25 SSE streams (SEP-1699): a bounded in-memory `EventStore`, scoped per session.

The SDK sends a POST's SSE stream a priming event (an id and a `retry:` hint) only when it has an
event store, stores every message it routes to a stream, and answers a `GET` with `Last-Event-ID`
by replaying what came after that id. Its `EventStore` interface names streams by JSON-RPC
request id, which two sessions share, and does not say which session an event belongs to; so
`SessionScopes`, an ASGI layer in front of the SDK's endpoint, puts the request's session in a
context variable. The SDK's message router for a session runs in a task started by that session's
opening request, so it sees the same scope as the session's later requests.

Everything is bounded: events per stream, streams per session, the age of an event, and the bytes
held by the whole store (the oldest streams go first). A session's events go when the session ends.
An event that cannot be replayed exactly (evicted, expired, another session's, another process's)
replays nothing: the client then starts afresh rather than missing a message silently. Streams
live in this process's memory, so only the replica holding the session can resume them.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from mcp.server.streamable_http import (
    MCP_SESSION_ID_HEADER,
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCResponse, jsonrpc_message_adapter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_SESSION_HEADER = MCP_SESSION_ID_HEADER.encode("ascii")
# What an event and a stream cost besides the events' JSON, as tracemalloc counts them (rounded up).
EVENT_OVERHEAD_BYTES = 200
STREAM_OVERHEAD_BYTES = 1200


@dataclass(eq=False)
class SessionScope:
    """One MCP session as the event store sees it; `session_id` is known once the SDK has named it."""

    session_id: str | None = None
    streams: dict[StreamId, _Stream] = field(default_factory=dict)
    ended: bool = False  # the session is over: what its requests still send is not kept


_scope: ContextVar[SessionScope | None] = ContextVar("mcp_session_scope", default=None)


@contextmanager
def within(session: SessionScope) -> Iterator[SessionScope]:
    """Run the block as part of `session`: what the SDK stores or replays in it is that session's."""
    token = _scope.set(session)
    try:
        yield session
    finally:
        _scope.reset(token)


@dataclass(slots=True)
class _Event:
    seq: int
    at: float
    payload: str | None  # the message's JSON; None for a priming event


@dataclass(eq=False)
class _Stream:
    serial: int
    key: StreamId
    owner: SessionScope
    events: deque[_Event] = field(default_factory=deque)
    last_seq: int = 0
    ended: bool = False
    size: int = STREAM_OVERHEAD_BYTES


class SessionEventStore(EventStore):
    def __init__(
        self,
        *,
        events_per_stream: int,
        streams_per_session: int,
        max_age_seconds: float,
        max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.events_per_stream = events_per_stream
        self.streams_per_session = streams_per_session
        self.max_age_seconds = max_age_seconds
        self.max_bytes = max_bytes
        self._clock = clock
        self._prefix = secrets.token_hex(4)  # ids from another process (or before a restart) never match
        self._serials = itertools.count(1)
        self._streams: OrderedDict[int, _Stream] = OrderedDict()  # oldest first
        self._sessions: dict[str, SessionScope] = {}
        self.size = 0

    # Sessions, as `SessionScopes` sees them

    def scope_of(self, session_id: str | None) -> SessionScope:
        """The scope of a named session, or a fresh one (an opening request, or a session we never
        named, which the SDK will refuse) that holds nothing until `register`."""
        known = self._sessions.get(session_id) if session_id is not None else None
        return known if known is not None else SessionScope()

    def register(self, session_id: str, scope: SessionScope) -> None:
        scope.session_id = session_id
        self._sessions[session_id] = scope

    def forget(self, session_id: str) -> None:
        """The session ended: its events go with it."""
        scope = self._sessions.pop(session_id, None)
        if scope is not None:
            scope.ended = True
            for stream in list(scope.streams.values()):
                self._drop(stream)

    def stream_count(self) -> int:
        return len(self._streams)

    def session_count(self) -> int:
        return len(self._sessions)

    # The SDK's interface

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        owner = _scope.get()
        # Outside a request's session scope, or after its session ended (a tool call that finishes
        # after the DELETE): nothing to resume from, and nothing kept that no session would forget.
        if owner is None or owner.ended:
            return f"{self._prefix}-0-{next(self._serials)}"
        now = self._clock()
        stream = owner.streams.get(stream_id)
        if stream is None or message is None:  # a priming event starts the stream (again)
            stream = self._open(owner, stream_id)
        payload = None if message is None else message.model_dump_json(by_alias=True, exclude_unset=True)
        stream.last_seq += 1
        event = _Event(stream.last_seq, now, payload)
        cost = EVENT_OVERHEAD_BYTES + (len(payload) if payload is not None else 0)
        stream.events.append(event)
        stream.size += cost
        self.size += cost
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            stream.ended = True
        event_id = f"{self._prefix}-{stream.serial}-{event.seq}"
        if len(stream.events) > self.events_per_stream:
            self._pop_oldest(stream)
        self._prune_expired(stream, now)
        while self.size > self.max_bytes and self._streams:
            self._drop(next(iter(self._streams.values())))
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        stream, after = self._find(last_event_id)
        if stream is None:
            return None
        self._prune_expired(stream, self._clock())
        first = stream.events[0].seq if stream.events else stream.last_seq + 1
        if after + 1 < first:  # some of what the client missed is gone: do not pretend otherwise
            return None
        missed = [event for event in stream.events if event.seq > after and event.payload is not None]
        for event in missed:
            assert event.payload is not None
            message = jsonrpc_message_adapter.validate_json(event.payload)
            await send_callback(EventMessage(message, f"{self._prefix}-{stream.serial}-{event.seq}"))
        return stream.key

    async def sweep(self) -> None:
        """Drop events past their age everywhere (streams nobody writes to age out here)."""
        now = self._clock()
        for stream in list(self._streams.values()):
            self._prune_expired(stream, now)

    # Bookkeeping

    def _find(self, event_id: str) -> tuple[_Stream | None, int]:
        prefix, _, rest = event_id.partition("-")
        serial_text, _, seq_text = rest.partition("-")
        # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
        numbers = _is_number(serial_text) and _is_number(seq_text)
        if prefix != self._prefix or not numbers or len(rest) > 40:
            return None, 0
        stream = self._streams.get(int(serial_text))
        owner = _scope.get()
        if stream is None or owner is None or stream.owner is not owner:
            return None, 0
        seq = int(seq_text)
        return (stream, seq) if seq <= stream.last_seq else (None, 0)

    def _open(self, owner: SessionScope, key: StreamId) -> _Stream:
        previous = owner.streams.get(key)
        if previous is not None and not previous.ended:
            owner.streams.pop(key)  # still replayable by its own ids until it ages out
        elif previous is not None:
            self._drop(previous)
        while len(owner.streams) >= self.streams_per_session:
            self._drop(next(iter(owner.streams.values())))
        stream = _Stream(serial=next(self._serials), key=key, owner=owner)
        owner.streams[key] = stream
        self._streams[stream.serial] = stream
        self.size += stream.size
        return stream

    def _pop_oldest(self, stream: _Stream) -> None:
        event = stream.events.popleft()
        cost = EVENT_OVERHEAD_BYTES + (len(event.payload) if event.payload is not None else 0)
        stream.size -= cost
        self.size -= cost

    def _prune_expired(self, stream: _Stream, now: float) -> None:
        cutoff = now - self.max_age_seconds
        while stream.events and stream.events[0].at <= cutoff:
            self._pop_oldest(stream)
        if not stream.events:
            self._drop(stream)

    def _drop(self, stream: _Stream) -> None:
        if self._streams.pop(stream.serial, None) is None:
            return
        if stream.owner.streams.get(stream.key) is stream:
            del stream.owner.streams[stream.key]
        self.size -= stream.size
        stream.events.clear()
        stream.size = 0


class SessionScopes:
    """ASGI layer in front of the SDK's `/mcp` endpoint: runs each request inside its session's
    `SessionScope`, and names the scope of an opening request once the SDK answers with a session id."""

    def __init__(self, app: ASGIApp, store: SessionEventStore) -> None:
        self.app = app
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = next((value for name, value in scope["headers"] if name == _SESSION_HEADER), None)
        session_id = header.decode("latin-1") if header is not None else None
        with within(self.store.scope_of(session_id)) as session:
            if session_id is not None:
                await self.app(scope, receive, send)
                return

            async def naming(message: Message) -> None:
                if message["type"] == "http.response.start" and message["status"] < 400:
                    for name, value in message.get("headers", ()):
                        if name.lower() == _SESSION_HEADER:
                            self.store.register(value.decode("latin-1"), session)
                await send(message)

            await self.app(scope, receive, naming)


_LAST_EVENT_ID_HEADER = b"last-event-id"


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


class NoResumption:
    """ASGI layer in front of the SDK's `/mcp` endpoint when streams are not resumable (no store).

    Without an event store the SDK answers a `GET` carrying `Last-Event-ID` by returning without
    any response at all, which the server turns into a 500. Resuming is optional for a server
    (SEP-1699): here the header is dropped, so the client gets the session's stream afresh, as it
    does when a store has nothing to replay for that id.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and any(name == _LAST_EVENT_ID_HEADER for name, _ in scope["headers"]):
            headers = [(name, value) for name, value in scope["headers"] if name != _LAST_EVENT_ID_HEADER]
            scope = {**scope, "headers": headers}
        await self.app(scope, receive, send)
