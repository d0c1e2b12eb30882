"""2025-11-25 sessions: -32042, elicitation/create, form-only clients, and who hears the completion."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as t
import pytest

from service.audit.models import AuditEvent
from service.paywall.models import Elicitation, ElicitationDelivery
from tests.support.mcp_clients import ClientProbe, call_expecting_32042, probed_client
from tests.support.mcp_http import legacy_session
from tests.support.payment import open_checkout, pay
from tests.support.service import RunningService, run_service

CHART_ARGS = {"values": [3, 1, 2], "labels": ["a", "b", "c"]}


async def test_32042_then_payment_then_notification_then_retry(service: RunningService) -> None:
    await service.add_user("ada")
    token = (await service.personal_token("ada")).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "ascii_chart", CHART_ARGS)
        assert elicitation.url == f"{service.base_url}/pay/{elicitation.elicitation_id}"
        assert "Pro" in elicitation.message and "9.00 USD / month" in elicitation.message

        again = await call_expecting_32042(client, "ascii_chart", CHART_ARGS)
        assert again.elicitation_id == elicitation.elicitation_id, "an open elicitation is reused"

        await pay(service, elicitation.url, "ada")
        assert await probe.wait_for_completion() == elicitation.elicitation_id

        result = await client.call_tool("ascii_chart", CHART_ARGS)
    assert not result.is_error
    assert "a | " in result.content[0].text  # type: ignore[union-attr]
    assert probe.url_requests == [], "the -32042 variant sends no elicitation/create"
    [row] = await service.rows(Elicitation, id=elicitation.elicitation_id)
    assert row.status == "completed"
    kinds = [
        event.kind for event in await service.rows(AuditEvent, elicitation_id=elicitation.elicitation_id)
    ]
    for kind in ("elicitation_created", "payment_page_opened", "checkout_created", "completion_delivered"):
        assert kind in kinds


@pytest.fixture
async def request_style_service(database_url: str) -> AsyncIterator[RunningService]:
    async with run_service(database_url, elicitation_style="request", payment_wait_seconds=30) as running:
        yield running


async def test_elicitation_create_accept_waits_for_payment_then_runs(
    request_style_service: RunningService,
) -> None:
    service = request_style_service
    await service.add_user("bea")
    token = (await service.personal_token("bea")).secret
    paid: list[asyncio.Task[str]] = []
    urls: list[str] = []

    async def accept(params: t.ElicitRequestURLParams) -> t.ElicitResult:
        urls.append(params.url)
        return t.ElicitResult(action="accept")

    reported: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        # The user pays once the call is waiting for it; paying before would find nothing to wait for.
        reported.append(progress)
        if not paid:
            paid.append(asyncio.create_task(pay(service, urls[0], "bea")))

    probe = ClientProbe(answer=accept)
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        result = await client.call_tool("ascii_chart", CHART_ARGS, progress_callback=on_progress)
    await asyncio.gather(*paid)
    assert not result.is_error, result
    assert "a | " in result.content[0].text  # type: ignore[union-attr]
    assert len(probe.url_requests) == 1
    assert probe.url_requests[0].url.startswith(f"{service.base_url}/pay/el_")
    assert reported, "the wait reports progress"


@pytest.mark.parametrize(("action", "phrase"), [("decline", "declined"), ("cancel", "cancelled")])
async def test_elicitation_create_decline_and_cancel(
    request_style_service: RunningService, action: str, phrase: str
) -> None:
    service = request_style_service
    await service.add_user("cy")
    token = (await service.personal_token("cy")).secret

    async def refuse(_: t.ElicitRequestURLParams) -> t.ElicitResult:
        return t.ElicitResult(action=action)

    async with probed_client(service.mcp_url, token, ClientProbe(answer=refuse), mode="legacy") as client:
        result = await client.call_tool("ascii_chart", CHART_ARGS)
    assert result.is_error
    assert phrase in result.content[0].text  # type: ignore[union-attr]


async def test_form_only_client_gets_the_link_as_text(service: RunningService) -> None:
    await service.add_user("dee")
    token = (await service.personal_token("dee")).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy", form_only=True) as client:
        result = await client.call_tool("ascii_chart", CHART_ARGS)
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert f"{service.base_url}/pay/el_" in text
    assert "call ascii_chart again" in text
    assert probe.url_requests == [] and probe.form_requests == 0


async def test_client_without_elicitation_gets_the_link_as_text(service: RunningService) -> None:
    await service.add_user("eve")
    token = (await service.personal_token("eve")).secret
    async with service.mcp_client(token, mode="legacy") as client:
        result = await client.call_tool(
            "sql_explain", {"query": "select * from orders where customer_id = 1"}
        )
    assert result.is_error
    assert "/pay/el_" in result.content[0].text  # type: ignore[union-attr]


@pytest.mark.filterwarnings("ignore:ping is removed:mcp.MCPDeprecationWarning")
async def test_only_the_initiating_session_hears_the_completion(service: RunningService) -> None:
    await service.add_user("fay")
    await service.add_user("gus")
    fay_token = (await service.personal_token("fay")).secret
    gus_token = (await service.personal_token("gus")).secret
    initiator, bystander_same_user, other_user = ClientProbe(), ClientProbe(), ClientProbe()
    async with (
        probed_client(service.mcp_url, fay_token, initiator, mode="legacy") as fay,
        probed_client(service.mcp_url, fay_token, bystander_same_user, mode="legacy") as fay_elsewhere,
        probed_client(service.mcp_url, gus_token, other_user, mode="legacy") as gus,
    ):
        gus_elicitation = await call_expecting_32042(gus, "ascii_chart", CHART_ARGS)
        await fay_elsewhere.call_tool("whoami", {})
        elicitation = await call_expecting_32042(fay, "ascii_chart", CHART_ARGS)
        await pay(service, elicitation.url, "fay")
        assert await initiator.wait_for_completion() == elicitation.elicitation_id
        # Both other sessions are open and idle; a ping round trip on each flushes anything queued for them.
        await fay_elsewhere.send_ping()
        await gus.send_ping()
    assert bystander_same_user.completed == []
    assert other_user.completed == []
    # The notice goes out first, then its row is marked delivered in a transaction of its own.
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        deliveries = await service.rows(ElicitationDelivery, elicitation_id=elicitation.elicitation_id)
        if (
            deliveries and deliveries[0].delivered_at is not None
        ) or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.02)
    assert len(deliveries) == 1, "only the session that called the paid tool is owed the notice"
    assert deliveries[0].delivered_at is not None
    assert gus_elicitation.elicitation_id != elicitation.elicitation_id


async def test_a_stranger_cannot_use_someone_elses_link(service: RunningService) -> None:
    await service.add_user("hal")
    await service.add_user("ivy")
    token = (await service.personal_token("hal")).secret
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
        elicitation = await call_expecting_32042(client, "ascii_chart", CHART_ARGS)
    refused = await open_checkout(service, elicitation.url, "ivy")
    assert refused.status_code == 403
    assert "another account" in refused.text
    sessions = await service.stripe.v1.checkout.sessions.list_async()
    assert sessions.data == [], "no Checkout Session may exist for a refused visitor"
    [mismatch] = await service.rows(AuditEvent, kind="identity_mismatch")
    assert mismatch.elicitation_id == elicitation.elicitation_id
    [row] = await service.rows(Elicitation, id=elicitation.elicitation_id)
    assert row.checkout_session_id is None and row.status == "open"


async def call_answering(service: RunningService, headers: dict[str, str], tool: str, answer: Any) -> Any:
    """Calls `tool` in the session `headers` name, answering its `elicitation/create` with
    `answer` (raw JSON: the SDK's client sends only what validates); the call's JSON-RPC answer."""
    call = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
    if tool == "ascii_chart":
        call["params"]["arguments"] = CHART_ARGS  # type: ignore[index]
    async with service.http() as http, http.stream("POST", "/mcp", headers=headers, json=call) as stream:
        async for line in stream.aiter_lines():
            if not line.startswith("data:") or not line[5:].strip():
                continue
            message = json.loads(line[5:])
            if message.get("method") == "elicitation/create":
                reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer}
                async with service.http() as replier:
                    assert (await replier.post("/mcp", headers=headers, json=reply)).status_code == 202
            elif message.get("id") == 8:
                return message
    raise AssertionError("the call was not answered")


async def test_an_answer_that_is_not_an_elicitation_result_is_a_tool_error_not_a_crash(
    request_style_service: RunningService, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK refuses a malformed answer with pydantic's ValidationError, which used to escape the
    paywall and the billing portal tool as a crash, logged with its traceback."""
    service = request_style_service
    await service.add_user("eve")
    token = (await service.personal_token("eve")).secret
    headers = await legacy_session(service, token, {"elicitation": {"url": {}}})
    paid = await call_answering(service, headers, "ascii_chart", {"action": "maybe"})
    portal = await call_answering(service, headers, "manage_billing", {"action": "accept", "content": 5})
    for message in (paid, portal):
        assert message["result"]["isError"]
        assert "not an elicitation result" in message["result"]["content"][0]["text"]
    assert "ascii_chart did not run" in paid["result"]["content"][0]["text"]
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []
