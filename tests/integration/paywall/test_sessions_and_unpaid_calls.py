"""What sessions and unpaid calls may cost: a per-user cap on legacy sessions, nothing held after a
session ends, no writes for a repeated unpaid call, bounded delivery rows, a refusal that ends the
wait at once, and a per-user cap on calls waiting for a payment."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import mcp_types as t
import pytest
from mcp.shared.dispatcher import ProgressFnT
from sqlalchemy import event
from sqlmodel import col, func, select

from service.audit.models import AuditEvent
from service.db.metadata import utcnow
from service.paywall.elicitations import prune_deliveries
from service.paywall.models import Elicitation, ElicitationDelivery, ElicitationStatus
from tests.integration.paywall.test_legacy_flow import CHART_ARGS
from tests.support.mcp_clients import ClientProbe, call_expecting_32042, payment_url, probed_client
from tests.support.mcp_http import ACCEPT, INITIALIZE
from tests.support.oauth import authorized_tokens
from tests.support.payment import pay
from tests.support.service import RunningService, run_service

CAP = 2
# A refused payment link must end the call; a call still waiting after this has hung on the wait.
HANG = 60.0


@pytest.fixture
async def capped(database_url: str) -> AsyncIterator[RunningService]:
    # A retry that waited for the payment would wait an hour: the refusal tests hang without the fix.
    async with run_service(
        database_url, max_legacy_sessions_per_user=CAP, retry_wait_seconds=3600
    ) as running:
        yield running


async def initialize(service: RunningService, token: str) -> tuple[int, str | None, str]:
    headers = {"Accept": ACCEPT, "Authorization": f"Bearer {token}"}
    async with service.http() as http:
        response = await http.post("/mcp", headers=headers, json=INITIALIZE)
    return response.status_code, response.headers.get("mcp-session-id"), response.text


def in_session(token: str, session_id: str) -> dict[str, str]:
    return {
        "Accept": ACCEPT,
        "Authorization": f"Bearer {token}",
        "Mcp-Session-Id": session_id,
        "MCP-Protocol-Version": "2025-11-25",
    }


async def delete_session(service: RunningService, token: str, session_id: str) -> int:
    async with service.http() as http:
        response = await http.delete("/mcp", headers=in_session(token, session_id))
    return response.status_code


async def list_tools(service: RunningService, token: str, session_id: str) -> int:
    request = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with service.http() as http:
        response = await http.post("/mcp", headers=in_session(token, session_id), json=request)
    return response.status_code


async def token_for(service: RunningService, username: str) -> str:
    await service.add_user(username)
    return (await service.personal_token(username)).secret


async def row_counts(service: RunningService, user_id: str) -> dict[str, int]:
    """The user's rows (the embedded Stripe sandbox's own webhooks add audit rows of no user)."""
    mine = select(Elicitation.id).where(col(Elicitation.user_id) == user_id)
    statements = {
        "elicitation": select(func.count())
        .select_from(Elicitation)
        .where(col(Elicitation.user_id) == user_id),
        "delivery": select(func.count())
        .select_from(ElicitationDelivery)
        .where(col(ElicitationDelivery.elicitation_id).in_(mine)),
        "audit": select(func.count()).select_from(AuditEvent).where(col(AuditEvent.user_id) == user_id),
    }
    async with service.runtime.sessions() as session:
        return {name: int((await session.exec(statement)).one()) for name, statement in statements.items()}


async def test_a_user_beyond_the_cap_is_refused_others_are_not_and_delete_frees_a_place(
    capped: RunningService,
) -> None:
    ada, bob = await token_for(capped, "ada"), await token_for(capped, "bob")
    opened = [await initialize(capped, ada) for _ in range(CAP)]
    assert [status for status, _, _ in opened] == [200] * CAP
    status, session_id, body = await initialize(capped, ada)
    assert status == 429
    assert session_id is None
    assert f"at most {CAP}" in body and "Close sessions" in body

    status, _, _ = await initialize(capped, bob)
    assert status == 200, "another user is not affected"

    first = opened[0][1]
    assert first is not None
    assert await delete_session(capped, ada, first) == 200
    status, session_id, _ = await initialize(capped, ada)
    assert status == 200 and session_id is not None, "a DELETE frees a place"


@pytest.mark.parametrize(
    "repeated",
    [
        [("MCP-Protocol-Version", "2025-11-25"), ("MCP-Protocol-Version", "2026-07-28")],
        [("Mcp-Session-Id", "first"), ("Mcp-Session-Id", "second")],
    ],
    ids=["protocol-version", "session-id"],
)
async def test_a_repeated_routing_header_is_refused_and_opens_no_session(
    capped: RunningService, repeated: list[tuple[str, str]]
) -> None:
    # The SDK routes on the first copy; a layer reading the last would let this initialize open a
    # legacy session the cap never counted.
    ada = await token_for(capped, "ada")
    headers = [("Accept", ACCEPT), ("Authorization", f"Bearer {ada}"), *repeated]
    async with capped.http() as http:
        for _ in range(CAP + 1):
            response = await http.post("/mcp", headers=headers, json=INITIALIZE)
            assert response.status_code == 400, response.text
            assert "mcp-session-id" not in response.headers
            error = response.json()["error"]
            assert error["code"] == t.INVALID_REQUEST and "at most once" in error["message"]

    opened = [await initialize(capped, ada) for _ in range(CAP)]
    assert [status for status, _, _ in opened] == [200] * CAP, "the refused ones took no place"
    status, session_id, _ = await initialize(capped, ada)
    assert (status, session_id) == (429, None), "the cap still holds"


async def test_the_same_users_other_credential_cannot_end_a_session_for_the_cap(
    capped: RunningService,
) -> None:
    # The SDK binds a session to the credential's principal (client id, issuer, subject): the user's
    # OAuth token gets a 404 for a session their personal token opened, and the SDK keeps it.
    pat = await token_for(capped, "dee")
    async with capped.http() as http:
        _, tokens = await authorized_tokens(capped, http, "dee")
    oauth = tokens["access_token"]
    opened = [await initialize(capped, pat) for _ in range(CAP)]
    session_ids = [session_id for _, session_id, _ in opened if session_id is not None]
    assert len(session_ids) == CAP
    for session_id in session_ids:
        assert await delete_session(capped, oauth, session_id) == 404
        assert await list_tools(capped, oauth, session_id) == 404

    status, _, _ = await initialize(capped, pat)
    assert status == 429, "the sessions the SDK still holds still count"
    status, _, _ = await initialize(capped, oauth)
    assert status == 429, "the cap is the user's, whichever credential"
    for session_id in session_ids:
        assert await list_tools(capped, pat, session_id) == 200

    assert await delete_session(capped, pat, session_ids[0]) == 200
    status, opened_id, _ = await initialize(capped, oauth)
    assert status == 200 and opened_id is not None, "the owner's DELETE frees a place"


async def test_a_deleted_session_is_no_longer_held_for_its_notice(capped: RunningService) -> None:
    token = await token_for(capped, "cy")
    async with probed_client(capped.mcp_url, token, ClientProbe(), mode="legacy") as client:
        await call_expecting_32042(client, "ascii_chart", CHART_ARGS)
        assert len(capped.runtime.notifier.held_session_ids) == 1
    # Leaving the client sent DELETE for its session.
    assert capped.runtime.notifier.held_session_ids == frozenset()
    status, _, _ = await initialize(capped, token)
    assert status == 200


async def test_a_repeated_unpaid_call_writes_nothing(capped: RunningService) -> None:
    user = await capped.add_user("dee")
    token = (await capped.personal_token("dee")).secret
    async with probed_client(capped.mcp_url, token, ClientProbe(), mode="legacy") as legacy:
        first = await call_expecting_32042(legacy, "ascii_chart", CHART_ARGS)
        async with probed_client(capped.mcp_url, token, ClientProbe()) as modern:
            asked = await modern.session.call_tool("ascii_chart", CHART_ARGS, allow_input_required=True)
            assert isinstance(asked, t.InputRequiredResult)
            before = await row_counts(capped, user.id)
            assert before == {"elicitation": 1, "delivery": 1, "audit": 1}
            for _ in range(3):
                again = await call_expecting_32042(legacy, "ascii_chart", CHART_ARGS)
                assert again.elicitation_id == first.elicitation_id
                asked = await modern.session.call_tool("ascii_chart", CHART_ARGS, allow_input_required=True)
                assert isinstance(asked, t.InputRequiredResult)
    assert await row_counts(capped, user.id) == before


async def test_a_repeated_unpaid_call_runs_no_sql(capped: RunningService) -> None:
    token = await token_for(capped, "dan")
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    async with probed_client(capped.mcp_url, token, ClientProbe(), mode="legacy") as legacy:
        first = await call_expecting_32042(legacy, "ascii_chart", CHART_ARGS)
        async with probed_client(capped.mcp_url, token, ClientProbe()) as modern:
            asked = await modern.session.call_tool("ascii_chart", CHART_ARGS, allow_input_required=True)
            assert isinstance(asked, t.InputRequiredResult)
            # The sandbox's own events about the catalog synced at start-up are not the calls' SQL.
            await capped.sandbox.deliver_pending(within=10)
            event.listen(capped.runtime.engine.sync_engine, "before_cursor_execute", count)
            try:
                again = await call_expecting_32042(legacy, "ascii_chart", CHART_ARGS)
                asked = await modern.session.call_tool("ascii_chart", CHART_ARGS, allow_input_required=True)
            finally:
                event.remove(capped.runtime.engine.sync_engine, "before_cursor_execute", count)
    assert again.elicitation_id == first.elicitation_id
    assert isinstance(asked, t.InputRequiredResult)
    assert statements == [], "the open link is remembered, the entitlement answer cached"


async def test_concurrent_first_unpaid_calls_in_one_session_all_get_the_link(capped: RunningService) -> None:
    # The link exists (asked on 2026-07-28); on PostgreSQL the session's first calls then race to
    # be owed its notice, and a loser used to fail its tool call.
    token = await token_for(capped, "fay")
    async with probed_client(capped.mcp_url, token, ClientProbe()) as modern:
        asked = await modern.session.call_tool("ascii_chart", CHART_ARGS, allow_input_required=True)
        assert isinstance(asked, t.InputRequiredResult)
    async with (
        probed_client(capped.mcp_url, token, ClientProbe(), mode="legacy") as legacy,
        asyncio.timeout(HANG),
        asyncio.TaskGroup() as group,
    ):
        first_calls = (call_expecting_32042(legacy, "ascii_chart", CHART_ARGS) for _ in range(24))
        calls = [group.create_task(call) for call in first_calls]
    assert len({call.result().elicitation_id for call in calls}) == 1


async def test_delivery_rows_per_elicitation_are_bounded(capped: RunningService) -> None:
    token = await token_for(capped, "eve")
    elicitation_ids = set()
    for _ in range(CAP + 3):
        async with probed_client(capped.mcp_url, token, ClientProbe(), mode="legacy") as client:
            elicitation_ids.add(
                (await call_expecting_32042(client, "ascii_chart", CHART_ARGS)).elicitation_id
            )
    [elicitation_id] = elicitation_ids
    deliveries = await capped.rows(ElicitationDelivery, elicitation_id=elicitation_id)
    assert len(deliveries) <= CAP


async def test_pruning_keeps_only_rows_still_owed(capped: RunningService) -> None:
    user = await capped.add_user("hal")
    now = utcnow()
    states = {
        "el_open": (ElicitationStatus.OPEN, None),
        "el_expired": (ElicitationStatus.EXPIRED, None),
        "el_done_long_ago": (ElicitationStatus.COMPLETED, now - timedelta(hours=2)),
        "el_done_now": (ElicitationStatus.COMPLETED, now),
    }
    async with capped.runtime.sessions() as session, session.begin():
        for elicitation_id, (status, completed_at) in states.items():
            session.add(
                Elicitation(
                    id=elicitation_id,
                    user_id=user.id,
                    plan_id=elicitation_id,
                    tool_name="ascii_chart",
                    protocol_era="2025-11-25",
                    status=status.value,
                    expires_at=now + timedelta(hours=1),
                    completed_at=completed_at,
                )
            )
        await session.flush()
        for elicitation_id in states:
            session.add(ElicitationDelivery(elicitation_id=elicitation_id, mcp_session_id="waiting"))
        session.add(
            ElicitationDelivery(elicitation_id="el_done_now", mcp_session_id="told", delivered_at=now)
        )
    async with capped.runtime.sessions() as session, session.begin():
        await prune_deliveries(session)
    left = {(row.elicitation_id, row.mcp_session_id) for row in await capped.rows(ElicitationDelivery)}
    assert left == {("el_open", "waiting"), ("el_done_now", "waiting")}


@pytest.mark.parametrize(("action", "phrase"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_a_refused_link_ends_the_2026_retry_at_once(
    capped: RunningService, action: str, phrase: str
) -> None:
    token = await token_for(capped, "fay")
    async with probed_client(capped.mcp_url, token, ClientProbe()) as client:
        first = await client.session.call_tool("ascii_chart", CHART_ARGS, allow_input_required=True)
        assert isinstance(first, t.InputRequiredResult)
        async with asyncio.timeout(HANG):
            answer = await client.session.call_tool(
                "ascii_chart",
                CHART_ARGS,
                allow_input_required=True,
                input_responses={"payment": t.ElicitResult(action=action)},
                request_state=first.request_state,
            )
    assert isinstance(answer, t.CallToolResult)
    assert answer.is_error
    text = answer.content[0].text  # type: ignore[union-attr]
    assert phrase in text and "ascii_chart did not run" in text


@pytest.fixture
async def request_style(database_url: str) -> AsyncIterator[RunningService]:
    async with run_service(database_url, elicitation_style="request", payment_wait_seconds=3600) as running:
        yield running


@pytest.mark.parametrize(("action", "phrase"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_a_refused_link_ends_the_legacy_call_at_once(
    request_style: RunningService, action: str, phrase: str
) -> None:
    token = await token_for(request_style, "gus")

    async def refuse(_: Any) -> t.ElicitResult:
        return t.ElicitResult(action=action)

    async with probed_client(
        request_style.mcp_url, token, ClientProbe(answer=refuse), mode="legacy"
    ) as client:
        async with asyncio.timeout(HANG):
            result = await client.call_tool("ascii_chart", CHART_ARGS)
    assert result.is_error
    assert phrase in result.content[0].text  # type: ignore[union-attr]


WAITS = 2


@pytest.fixture
async def few_waits(database_url: str) -> AsyncIterator[RunningService]:
    # Every wait would last an hour: a call beyond the cap that waited hangs the test without the cap.
    async with run_service(
        database_url,
        max_payment_waits_per_user=WAITS,
        retry_wait_seconds=3600,
        elicitation_style="request",
        payment_wait_seconds=3600,
    ) as running:
        yield running


def progressed(event: asyncio.Event) -> ProgressFnT:
    """A progress callback that sets `event`: the gate reports progress once the call waits."""

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        event.set()

    return on_progress


async def test_a_2026_retry_beyond_the_users_waits_is_asked_again_at_once(few_waits: RunningService) -> None:
    token = await token_for(few_waits, "hal")
    async with probed_client(few_waits.mcp_url, token, ClientProbe()) as client:
        first = await client.session.call_tool("ascii_chart", CHART_ARGS, allow_input_required=True)
        assert isinstance(first, t.InputRequiredResult)
        url = payment_url(first)

        async def retry(on_progress: ProgressFnT | None = None) -> t.CallToolResult | t.InputRequiredResult:
            return await client.session.call_tool(
                "ascii_chart",
                CHART_ARGS,
                progress_callback=on_progress,
                allow_input_required=True,
                input_responses={"payment": t.ElicitResult(action="accept")},
                request_state=first.request_state,
            )

        # Leaving the group on a failure cancels the waiting retries.
        async with asyncio.timeout(HANG), asyncio.TaskGroup() as group:
            waiting = [asyncio.Event() for _ in range(WAITS)]
            retries = [group.create_task(retry(progressed(event))) for event in waiting]
            for event in waiting:
                await event.wait()
            beyond = await retry()
            assert isinstance(beyond, t.InputRequiredResult), "answered as a retry that found nothing paid"
            assert payment_url(beyond) == url
            await pay(few_waits, url, "hal")
    for released in retries:
        done = released.result()
        assert isinstance(done, t.CallToolResult) and not done.is_error, "a waiting retry runs once paid"


async def test_a_legacy_call_beyond_the_users_waits_is_answered_at_once(few_waits: RunningService) -> None:
    token = await token_for(few_waits, "ida")
    probe = ClientProbe()
    async with (
        probed_client(few_waits.mcp_url, token, probe, mode="legacy") as client,
        asyncio.timeout(HANG),
        asyncio.TaskGroup() as group,
    ):
        waiting = [asyncio.Event() for _ in range(WAITS)]
        calls = [
            group.create_task(
                client.call_tool("ascii_chart", CHART_ARGS, progress_callback=progressed(event))
            )
            for event in waiting
        ]
        for event in waiting:
            await event.wait()
        beyond = await client.call_tool("ascii_chart", CHART_ARGS)
        assert beyond.is_error
        assert "has not been confirmed yet" in beyond.content[0].text  # type: ignore[union-attr]
        await pay(few_waits, probe.url_requests[0].url, "ida")
    assert not any(call.result().is_error for call in calls), "the waiting calls run once paid"


@pytest.fixture
async def short_wait(database_url: str) -> AsyncIterator[RunningService]:
    async with run_service(database_url, elicitation_style="request", payment_wait_seconds=0.5) as running:
        yield running


class UnansweredLinks:
    """A client's answer to the payment link that never comes; `asked` counts the requests."""

    def __init__(self) -> None:
        self.asked = 0
        self.changed = asyncio.Condition()

    async def __call__(self, _: Any) -> t.ElicitResult:
        async with self.changed:
            self.asked += 1
            self.changed.notify_all()
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def reached(self, count: int) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: self.asked >= count)


async def test_an_unanswered_elicitation_ends_the_call_after_the_payment_wait(
    short_wait: RunningService,
) -> None:
    token = await token_for(short_wait, "jan")
    async with probed_client(
        short_wait.mcp_url, token, ClientProbe(answer=UnansweredLinks()), mode="legacy"
    ) as client:
        async with asyncio.timeout(HANG):
            result = await client.call_tool("ascii_chart", CHART_ARGS)
    assert result.is_error
    assert "has not been confirmed yet" in result.content[0].text  # type: ignore[union-attr]


async def test_unanswered_elicitations_count_against_the_users_waits(few_waits: RunningService) -> None:
    token = await token_for(few_waits, "kit")
    unanswered = UnansweredLinks()
    async with probed_client(
        few_waits.mcp_url, token, ClientProbe(answer=unanswered), mode="legacy"
    ) as client:
        asking = [asyncio.create_task(client.call_tool("ascii_chart", CHART_ARGS)) for _ in range(WAITS)]
        try:
            async with asyncio.timeout(HANG):
                await unanswered.reached(WAITS)
                beyond = await client.call_tool("ascii_chart", CHART_ARGS)
        finally:
            for call in asking:
                call.cancel()
            await asyncio.gather(*asking, return_exceptions=True)
    assert beyond.is_error
    assert "has not been confirmed yet" in beyond.content[0].text  # type: ignore[union-attr]
    assert unanswered.asked == WAITS, "the call beyond the waits was not asked"
