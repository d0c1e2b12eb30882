"""The paywall through the SDK's in-memory client: free tools, URL elicitations, plans and credits."""

from __future__ import annotations

from typing import Any

import mcp_types as t
import pytest
from mcp import MCPError, UrlElicitationRequiredError

from service.billing.usage_models import CreditEntry, UsageRecord
from service.identity.models import User
from service.paywall.models import Elicitation
from tests.support import factories
from tests.support.in_memory import InMemoryService, run_in_memory
from tests.support.mcp_clients import ClientProbe

CHART = "ascii_chart"
CHART_ARGS = {"values": [3, 1, 2], "labels": ["a", "b", "c"]}
MODERN = "2026-07-28"


def text_of(result: t.CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, t.TextContent)
    return content.text


async def test_a_free_tool_runs_for_the_injected_caller(memory: InMemoryService) -> None:
    ada = await memory.add_user("ada")
    async with memory.client(ada, mode="legacy") as client:
        result = await client.call_tool("whoami", {})
    assert not result.is_error, result
    assert result.structured_content is not None
    assert result.structured_content["user_id"] == ada.id
    assert result.structured_content["username"] == "ada"


async def test_without_a_plan_a_handshake_client_gets_32042_with_a_payment_link(
    memory: InMemoryService,
) -> None:
    bea = await memory.add_user("bea")
    probe = ClientProbe()  # its elicitation callback declares URL-mode support
    async with memory.client(bea, mode="legacy", elicitation_callback=probe.elicitation_callback) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool(CHART, CHART_ARGS)
    assert raised.value.code == -32042
    assert probe.url_requests == [], "the -32042 style sends no elicitation/create"
    [link] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
    [row] = await memory.rows(Elicitation, user_id=bea.id)
    assert link.elicitation_id == row.id and row.tool_name == CHART and row.plan_id == "pro"
    assert link.url == factories.payment_url(memory, row)
    assert "Pro" in link.message


async def test_a_handshake_client_without_url_elicitation_gets_the_link_as_a_tool_error(
    memory: InMemoryService,
) -> None:
    bo = await memory.add_user("bo")
    async with memory.client(bo, mode="legacy") as client:
        result = await client.call_tool(CHART, CHART_ARGS)
    [row] = await memory.rows(Elicitation, user_id=bo.id)
    assert result.is_error and factories.payment_url(memory, row) in text_of(result)


async def test_without_a_plan_a_modern_client_is_asked_to_pay_and_declining_runs_nothing(
    memory: InMemoryService,
) -> None:
    cy = await memory.add_user("cy")
    asked: list[t.ElicitRequestURLParams] = []

    async def decline(_: object, params: t.ElicitRequestParams) -> t.ElicitResult:
        assert isinstance(params, t.ElicitRequestURLParams)
        asked.append(params)
        return t.ElicitResult(action="decline")

    async with memory.client(cy, mode=MODERN, elicitation_callback=decline) as client:
        result = await client.call_tool(CHART, CHART_ARGS)
    assert result.is_error and "declined" in text_of(result)
    [row] = await memory.rows(Elicitation, user_id=cy.id)
    assert [params.url for params in asked] == [factories.payment_url(memory, row)]


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_with_a_plan_the_paid_tool_runs(memory: InMemoryService, mode: str) -> None:
    dee = await memory.add_user("dee")
    await factories.subscription(memory, dee, plan_id="pro")
    async with memory.client(dee, mode=mode) as client:
        result = await client.call_tool(CHART, CHART_ARGS)
        status = await client.call_tool("billing_status", {})
    assert not result.is_error, result
    assert "a | " in text_of(result)
    assert status.structured_content is not None
    [pro] = status.structured_content["subscriptions"]
    assert pro["plan"] == "pro" and pro["has_access"] and pro["calls_used"] == 1
    assert await memory.rows(Elicitation, user_id=dee.id) == []


async def test_a_paid_tool_refusing_its_input_says_why(memory: InMemoryService) -> None:
    ada = await memory.add_user("ada")
    await factories.subscription(memory, ada, plan_id="team")
    async with memory.client(ada) as client:
        explained = await client.call_tool("sql_explain", {"query": "delete from customers"})
        charted = await client.call_tool(CHART, {"values": [1, 2], "labels": ["a"]})
    assert explained.is_error and "only SELECT queries can be explained" in text_of(explained)
    assert charted.is_error and "labels and values must have the same length" in text_of(charted)


async def test_a_plan_that_does_not_unlock_the_tool_still_asks(memory: InMemoryService) -> None:
    eve = await memory.add_user("eve")
    await factories.subscription(memory, eve, plan_id="pro")
    probe = ClientProbe()
    async with memory.client(eve, mode="legacy", elicitation_callback=probe.elicitation_callback) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("password_audit", {"password": "hunter2"})
    assert raised.value.code == -32042
    [row] = await memory.rows(Elicitation, user_id=eve.id)
    assert row.plan_id == "team"


async def test_credits_pay_one_call_each(memory: InMemoryService) -> None:
    fay = await memory.add_user("fay")
    granted = await factories.credits(memory, fay)
    async with memory.client(fay, mode="legacy") as client:
        result = await client.call_tool(CHART, CHART_ARGS)
        status = await client.call_tool("billing_status", {})
    assert not result.is_error, result
    assert status.structured_content is not None
    assert status.structured_content["credits"] == granted - 1
    spent = [entry for entry in await memory.rows(CreditEntry, user_id=fay.id) if entry.delta < 0]
    assert [entry.delta for entry in spent] == [-1]


async def test_pay_as_you_go_meters_each_call(memory: InMemoryService) -> None:
    gus = await memory.add_user("gus")
    await factories.subscription(memory, gus, plan_id="payg")
    async with memory.client(gus, mode="legacy") as client:
        for _ in range(2):
            assert not (await client.call_tool(CHART, CHART_ARGS)).is_error
        status = await client.call_tool("billing_status", {})
    assert status.structured_content is not None
    [payg] = status.structured_content["subscriptions"]
    assert payg["metered_calls"] == 2


async def paid_calls(memory: InMemoryService, user: User) -> dict[str, Any]:
    """What `billing_status` says the user has paid for: credits left, included and metered calls."""
    async with memory.client(user) as client:
        status = (await client.call_tool("billing_status", {})).structured_content
    assert status is not None
    plans = {item["plan"]: item for item in status["subscriptions"]}
    return {
        "credits": status["credits"],
        "included": plans["pro"]["calls_used"] if "pro" in plans else None,
        "metered": plans["payg"]["metered_calls"] if "payg" in plans else None,
    }


@pytest.mark.parametrize("funding", ["credits", "pro", "payg"])
@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_a_call_that_fails_is_not_paid_for(memory: InMemoryService, funding: str, mode: str) -> None:
    """Bad input loses nothing: a paid call the tool refuses gives back its credit, its included
    call or its metered charge (its usage row goes), and the next call is paid as usual."""
    kim = await memory.add_user("kim")
    if funding == "credits":
        await factories.credits(memory, kim)
    else:
        await factories.subscription(memory, kim, plan_id=funding)
    before = await paid_calls(memory, kim)
    async with memory.client(kim, mode=mode) as client:
        refused = await client.call_tool("sql_explain", {"query": "delete from customers"})
    assert refused.is_error and "only SELECT queries" in text_of(refused)
    assert await paid_calls(memory, kim) == before
    assert await memory.rows(UsageRecord, user_id=kim.id) == []
    async with memory.client(kim, mode=mode) as client:
        assert not (await client.call_tool("sql_explain", {"query": "select 1"})).is_error
    after = await paid_calls(memory, kim)
    if funding == "credits":
        assert after["credits"] == before["credits"] - 1
        entries = [entry.delta for entry in await memory.rows(CreditEntry, user_id=kim.id)]
        assert sorted(entries) == sorted([before["credits"], -1, 1, -1]), "spent, given back, spent"
    else:
        used = "included" if funding == "pro" else "metered"
        assert after[used] == before[used] + 1
    assert len(await memory.rows(UsageRecord, user_id=kim.id)) == 1


async def test_a_result_over_the_output_cap_is_not_paid_for(database_url: str) -> None:
    async with run_in_memory(database_url, max_tool_output_bytes=1024) as memory:
        lea = await memory.add_user("lea")
        granted = await factories.credits(memory, lea)
        async with memory.client(lea) as client:
            capped = await client.call_tool(CHART, {"values": [1.0] * 60, "width": 100})
            # Its text within the cap, but sent twice (content and structured content): over it.
            capped_as_sent = await client.call_tool(CHART, {"values": [1.0] * 12, "width": 45})
            small = await client.call_tool(CHART, CHART_ARGS)
        assert capped.is_error and "over" in text_of(capped)
        assert capped_as_sent.is_error and "over" in text_of(capped_as_sent)
        assert not small.is_error
        assert (await paid_calls(memory, lea))["credits"] == granted - 1, "only the small result paid"
