"""SEP-1699 over real HTTP: a 2025-11-25 POST's SSE stream opens with a priming event (id and
`retry:`), and a client that lost the stream gets what it missed by reconnecting with
`Last-Event-ID`; only on its own session, and only while the session lives."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from mcp_types import JSONRPCMessage, JSONRPCResponse

from service.mcp_server.event_store import SessionEventStore
from tests.support.mcp_http import ACCEPT, INITIALIZE, legacy_session
from tests.support.service import RunningService, run_service

LEGACY = "2025-11-25"


@dataclass
class SseEvent:
    id: str | None
    retry: int | None
    data: str


async def sse_events(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """The events of an SSE body as they arrive (the fields these tests look at)."""
    fields: dict[str, str] = {}
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if fields or data:
                retry = fields.get("retry")
                yield SseEvent(fields.get("id"), int(retry) if retry else None, "\n".join(data))
            fields, data = {}, []
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name:
            fields[name] = value


@dataclass
class Session:
    http: httpx.AsyncClient
    token: str
    session_id: str

    def headers(self, **extra: str) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.token}",
            "Mcp-Session-Id": self.session_id,
            "MCP-Protocol-Version": LEGACY,
            "Accept": ACCEPT,
            **extra,
        }


async def open_session(
    service: RunningService, http: httpx.AsyncClient, username: str, *, primed: bool = True
) -> Session:
    await service.add_user(username)
    token = (await service.personal_token(username)).secret
    auth = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
    async with http.stream("POST", "/mcp", json=INITIALIZE, headers=auth) as response:
        assert response.status_code == 200
        session_id = response.headers["mcp-session-id"]
        events = [event async for event in sse_events(response)]
    if primed:
        assert events[0].id and events[0].data == "", "the initialize stream is primed too"
    session = Session(http, token, session_id)
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post("/mcp", json=initialized, headers=session.headers())).status_code == 202
    return session


def whoami_call(request_id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "whoami", "arguments": {}},
    }


async def primed_then_dropped(session: Session, request_id: int) -> SseEvent:
    """Calls `whoami`, reads only the priming event, and hangs up."""
    async with session.http.stream(
        "POST", "/mcp", json=whoami_call(request_id), headers=session.headers()
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        priming = await anext(sse_events(response))
    return priming


async def resumed_response(session: Session, last_event_id: str, request_id: int) -> dict[str, Any] | None:
    """Reconnects with `Last-Event-ID`; the JSON-RPC response to `request_id` if the replay has it.
    The replay stream stays open for live messages, so it is left once the response is in."""
    headers = session.headers(**{"Last-Event-ID": last_event_id, "Accept": "text/event-stream"})
    async with session.http.stream("GET", "/mcp", headers=headers) as response:
        assert response.status_code == 200
        async for event in sse_events(response):
            if not event.data:
                continue
            message: dict[str, Any] = json.loads(event.data)
            if message.get("id") == request_id:
                assert event.id, "replayed events keep their ids"
                return message
    return None


def response_stored(
    store: SessionEventStore, request_id: int, monkeypatch: pytest.MonkeyPatch
) -> asyncio.Event:
    """Set once the store holds the response to `request_id`. Resuming before that would race the
    SDK's hand-over from replaying to live messages, not test the replay."""
    stored = asyncio.Event()
    store_event = store.store_event

    async def observed(stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = await store_event(stream_id, message)
        if isinstance(message, JSONRPCResponse) and message.id == request_id:
            stored.set()
        return event_id

    monkeypatch.setattr(store, "store_event", observed)
    return stored


async def test_a_post_stream_is_primed_and_a_lost_response_is_replayed(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        run_service(database_url, mcp_resumable_streams=True, mcp_sse_retry_ms=2500) as service,
        service.http() as http,
    ):
        session = await open_session(service, http, "ada")
        store = service.app.state.mcp_http.events
        assert isinstance(store, SessionEventStore)
        stored = response_stored(store, 2, monkeypatch)
        priming = await primed_then_dropped(session, 2)

        assert priming.id, "the priming event carries an id to resume from"
        assert priming.retry == 2500
        assert priming.data == ""
        with anyio.fail_after(30):
            await stored.wait()
        message = await resumed_response(session, priming.id, 2)
        assert message is not None
        assert message["result"]["structuredContent"]["username"] == "ada"


async def test_another_session_cannot_replay_a_stream(database_url: str) -> None:
    async with run_service(database_url, mcp_resumable_streams=True) as service, service.http() as http:
        ada = await open_session(service, http, "ada")
        eve = await open_session(service, http, "eve")
        priming = await primed_then_dropped(ada, 2)
        assert priming.id is not None

        headers = eve.headers(**{"Last-Event-ID": priming.id, "Accept": "text/event-stream"})
        async with http.stream("GET", "/mcp", headers=headers) as response:
            replayed = [event async for event in sse_events(response)]
        assert replayed == [], "ada's events are not eve's to read"


async def test_events_go_with_their_session(database_url: str) -> None:
    async with run_service(database_url, mcp_resumable_streams=True) as service, service.http() as http:
        events = service.app.state.mcp_http.events
        session = await open_session(service, http, "ada")
        priming = await primed_then_dropped(session, 2)
        assert priming.id is not None
        assert events.session_count() == 1
        assert events.stream_count() >= 1

        closed = await http.delete("/mcp", headers=session.headers())
        assert closed.status_code == 200
        assert events.session_count() == 0
        assert events.stream_count() == 0


async def test_by_default_there_is_no_priming_event(database_url: str) -> None:
    async with run_service(database_url) as service, service.http() as http:
        await service.add_user("ada")
        token = (await service.personal_token("ada")).secret
        headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
        async with http.stream("POST", "/mcp", json=INITIALIZE, headers=headers) as response:
            events = [event async for event in sse_events(response)]
        assert [event.id for event in events] == [None]
        assert json.loads(events[0].data)["result"]["protocolVersion"] == LEGACY


@pytest.mark.parametrize("resumable", [False, True], ids=["streams-not-resumable", "resumable"])
async def test_a_last_event_id_nothing_can_resume_opens_the_stream_afresh(
    database_url: str, resumable: bool
) -> None:
    """Without an event store the SDK returned no response at all to such a GET: a 500."""
    async with (
        run_service(database_url, mcp_resumable_streams=resumable) as service,
        service.http() as http,
    ):
        await service.add_user("ada")
        session = await legacy_session(service, (await service.personal_token("ada")).secret)
        for last_event_id in ("!", "0", "x" * 300):
            headers = {**session, "Last-Event-ID": last_event_id, "Accept": "text/event-stream"}
            async with http.stream("GET", "/mcp", headers=headers) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")


async def test_an_event_id_with_non_ascii_digits_replays_nothing_quietly(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """ "²" is a digit to str.isdigit() but not to int(): the store raised, and the SDK logged it."""
    async with run_service(database_url, mcp_resumable_streams=True) as service, service.http() as http:
        session = await open_session(service, http, "ada")
        priming = await primed_then_dropped(session, 2)
        assert priming.id is not None
        prefix, serial, seq = priming.id.split("-")
        for forged in (f"{prefix}-\xb2-{seq}", f"{prefix}-{serial}-\xb9"):
            as_text = {**session.headers(), "Last-Event-ID": forged, "Accept": "text/event-stream"}
            headers = {name.encode(): value.encode("latin-1") for name, value in as_text.items()}
            async with http.stream("GET", "/mcp", headers=headers) as response:
                assert response.status_code == 200
                assert [event async for event in sse_events(response) if event.data] == []
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []
