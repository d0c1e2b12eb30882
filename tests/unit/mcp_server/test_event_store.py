"""`SessionEventStore`'s bounds: what it keeps, what it lets go, and that it never replays a gap."""

from __future__ import annotations

from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCNotification, JSONRPCResponse

from service.mcp_server.event_store import (
    EVENT_OVERHEAD_BYTES,
    STREAM_OVERHEAD_BYTES,
    SessionEventStore,
    SessionScope,
    within,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_store(clock: Clock | None = None, **bounds: float) -> SessionEventStore:
    values: dict[str, float] = {
        "events_per_stream": 4,
        "streams_per_session": 3,
        "max_age_seconds": 60,
        "max_bytes": 1_000_000,
        **bounds,
    }
    return SessionEventStore(
        events_per_stream=int(values["events_per_stream"]),
        streams_per_session=int(values["streams_per_session"]),
        max_age_seconds=values["max_age_seconds"],
        max_bytes=int(values["max_bytes"]),
        clock=clock or Clock(),
    )


def progress(n: int) -> JSONRPCNotification:
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/progress", params={"n": n})


def response(request_id: int) -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"ok": True})


async def replay(store: SessionEventStore, last_event_id: str) -> tuple[str | None, list[EventMessage]]:
    sent: list[EventMessage] = []

    async def collect(event: EventMessage) -> None:
        sent.append(event)

    stream = await store.replay_events_after(last_event_id, collect)
    return stream, sent


def store_id(event_id: str, seq: int) -> str:
    """Another event id of the same stream."""
    return event_id.rsplit("-", 1)[0] + f"-{seq}"


def session(store: SessionEventStore, session_id: str) -> SessionScope:
    scope = store.scope_of(session_id)
    store.register(session_id, scope)
    return scope


async def test_replays_what_came_after_the_id_with_the_ids_it_gave() -> None:
    store = make_store()
    with within(session(store, "s1")):
        priming = await store.store_event("1", None)
        ids = [await store.store_event("1", progress(1)), await store.store_event("1", response(1))]
        stream, sent = await replay(store, priming)

    assert stream == "1"
    assert [event.event_id for event in sent] == ids
    assert sent[1].message == response(1)


async def test_only_so_many_events_per_stream_and_a_gap_replays_nothing() -> None:
    store = make_store(events_per_stream=3)
    with within(session(store, "s1")):
        priming = await store.store_event("1", None)
        ids = [await store.store_event("1", progress(n)) for n in range(4)]
        assert await replay(store, priming) == (None, []), "events after it were evicted"
        stream, sent = await replay(store, ids[0])

    assert stream == "1"
    assert [event.event_id for event in sent] == ids[1:]


async def test_only_so_many_streams_per_session() -> None:
    store = make_store(streams_per_session=2)
    with within(session(store, "s1")):
        first = await store.store_event("1", None)
        await store.store_event("2", None)
        await store.store_event("3", None)
        assert store.stream_count() == 2
        assert await replay(store, first) == (None, [])


async def test_events_expire() -> None:
    clock = Clock()
    store = make_store(clock, max_age_seconds=60)
    with within(session(store, "s1")):
        priming = await store.store_event("1", None)
        await store.store_event("1", progress(1))
        clock.now += 61
        await store.sweep()
        assert store.stream_count() == 0
        assert store.size == 0
        assert await replay(store, priming) == (None, [])


async def test_the_whole_store_is_bounded_in_bytes_oldest_streams_first() -> None:
    store = make_store(max_bytes=3 * (EVENT_OVERHEAD_BYTES + STREAM_OVERHEAD_BYTES) + 100)
    with within(session(store, "s1")):
        old = await store.store_event("1", None)
    with within(session(store, "s2")):
        newest = [await store.store_event(str(n), None) for n in range(3)]
        await store.store_event("2", response(2))
        assert store.size <= store.max_bytes
        assert await replay(store, newest[-1]) == ("2", [EventMessage(response(2), store_id(newest[-1], 2))])
    with within(store.scope_of("s1")):
        assert await replay(store, old) == (None, [])


async def test_another_session_and_no_session_replay_nothing() -> None:
    store = make_store()
    with within(session(store, "s1")):
        priming = await store.store_event("1", None)
        await store.store_event("1", response(1))
    with within(session(store, "s2")):
        assert await replay(store, priming) == (None, [])
    assert await replay(store, priming) == (None, [])
    assert await replay(store, "garbage") == (None, [])
    assert await replay(store, priming.replace(priming.split("-")[0], "00000000")) == (None, [])


async def test_forgetting_a_session_frees_its_events() -> None:
    store = make_store()
    with within(session(store, "s1")):
        await store.store_event("1", None)
        await store.store_event("1", response(1))
    store.forget("s1")
    assert (store.stream_count(), store.session_count(), store.size) == (0, 0, 0)


async def test_what_a_request_sends_after_its_session_ended_is_not_kept() -> None:
    """A tool call still running when its session is deleted answers into a scope no one forgets."""
    store = make_store()
    ending = session(store, "s1")
    with within(ending):
        priming = await store.store_event("2", None)
    store.forget("s1")
    with within(ending):
        late = await store.store_event("2", response(2))
        assert await replay(store, priming) == (None, [])
    assert late != priming
    assert (store.stream_count(), store.size) == (0, 0)


async def test_outside_any_session_nothing_is_kept() -> None:
    store = make_store()
    first = await store.store_event("1", None)
    second = await store.store_event("1", None)
    assert first != second
    assert store.stream_count() == 0
