"""SIGTERM, as Kubernetes sends it in every rolling deploy, lets in-flight tool calls finish.

A real `python -m service serve` process holds four 2025-11-25 tool calls answered over SSE (the
era whose streams sse-starlette used to end at the signal) when it is told to terminate: it stops
accepting connections, the calls complete with their results, the idle session streams are ended
after them, and the process exits cleanly without uvicorn having to cancel anything.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from service.db.engine import create_engine, create_session_factory
from service.identity import service as identity
from tests.support.databases import DatabaseTemplates
from tests.support.polling import until
from tests.support.replicas import Replica
from tests.support.servers import ReservedPort
from tests.support.service import cheap_password_hashing

CALLS = 4


async def personal_token(database_url: str, resource: str) -> str:
    engine = create_engine(database_url)
    try:
        async with create_session_factory(engine)() as session, session.begin():
            await identity.create_user(session, "alice", "correct horse battery", cheap_password_hashing())
            issued = await identity.create_personal_token(
                session, "alice", resource=resource, label="shutdown test", ttl=None
            )
    finally:
        await engine.dispose()
    return issued.secret


async def held_call(replica: Replica, token: str, name: str) -> str:
    """The call's text. Closing the session afterwards (DELETE) finds the listener closed: expected."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60.0)
    text = ""
    try:
        async with (
            http,
            Client(streamable_http_client(replica.mcp_url, http_client=http), mode="legacy") as client,
        ):
            # Listed first: the client would otherwise ask for the list after the result, to check
            # its schema, and that new request would find this replica's listener closed.
            await client.list_tools()
            result = await client.call_tool("held_call", {"name": name})
            assert not result.is_error, result
            text = " ".join(getattr(block, "text", "") for block in result.content)
    except* httpx2.ConnectError:
        assert text, "the call failed to connect before it had its result"
    return text


async def test_sigterm_lets_in_flight_legacy_sse_calls_finish(
    db_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    database_url = db_templates.fresh_url(tmp_path)
    gate = tmp_path / "gate"
    gate.mkdir()
    reserved = ReservedPort()
    replica = Replica(
        "terminated",
        reserved,
        {
            "DATABASE_URL": database_url,
            "PUBLIC_BASE_URL": f"http://127.0.0.1:{reserved.port}",
            "STRIPE_SANDBOX_PORT": "0",
            "STRIPE_SANDBOX_STATE_FILE": str(tmp_path / "stripe.json"),
            "TOOL_PACKAGES": "service.example_tools:tools,tests.fixtures.vendor_tools:held",
            "TEST_GATE_DIR": str(gate),
            "LOG_LEVEL": "INFO",
        },
        stripe_client=None,  # type: ignore[arg-type]
        log_path=tmp_path / "replica.log",
    )
    try:
        token = await personal_token(database_url, replica.mcp_url)
        await replica.start()
        calls = [asyncio.create_task(held_call(replica, token, f"call-{n}")) for n in range(CALLS)]

        async def all_started() -> bool:
            return len(list(gate.glob("*.started"))) == CALLS

        await until(all_started, "every call in flight")
        assert replica.process is not None
        replica.process.send_signal(signal.SIGTERM)

        async def refusing_connections() -> bool:
            try:
                async with httpx.AsyncClient(timeout=1.0) as http:
                    await http.get(f"{replica.base_url}/healthz")
            except httpx.ConnectError:
                return True
            except (httpx.RemoteProtocolError, httpx.ReadError):
                # Accepted into the backlog just before the listener closed, then dropped
                # unanswered: closed without a response, or reset (a read error).
                return True
            return False

        await until(refusing_connections, "the listener closed")  # the signal has been handled
        assert not any(call.done() for call in calls)
        (gate / "open").touch()
        async with asyncio.timeout(30):
            results = await asyncio.gather(*calls)
            exit_code = await replica.process.wait()
    finally:
        await replica.kill()
        reserved.close()
    assert sorted(results) == [f"call-{n} done" for n in range(CALLS)]
    log = replica.log()
    # uvicorn re-raises the signal it handled once it has shut down, so the exit is SIGTERM's.
    assert exit_code in (0, -signal.SIGTERM), log[-5000:]
    assert "Application shutdown complete" in log
    assert "ASGI callable returned without completing response" not in log
    assert "timeout graceful shutdown exceeded" not in log
