"""2026-07-28 clients: InputRequiredResult with a sealed request_state; retries wait for the payment."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import mcp_types as t
import pytest
from mcp import Client, MCPError

from service.paywall.models import Elicitation
from tests.support.mcp_clients import ClientProbe, bearer_transport, payment_url, probed_client
from tests.support.payment import pay
from tests.support.service import RunningService, run_service

QUERY = {"query": "select email from customers join orders on orders.customer_id = customers.id"}


async def test_sdk_client_loop_pays_and_gets_the_result(service: RunningService) -> None:
    await service.add_user("kai")
    token = (await service.personal_token("kai")).secret

    async def pay_then_accept(params: t.ElicitRequestURLParams) -> t.ElicitResult:
        await pay(service, params.url, "kai")
        return t.ElicitResult(action="accept")

    probe = ClientProbe(answer=pay_then_accept)
    async with probed_client(service.mcp_url, token, probe) as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("sql_explain", QUERY)
    assert not result.is_error, result
    assert "Verdict:" in result.content[0].text  # type: ignore[union-attr]
    assert len(probe.url_requests) == 1
    assert probe.url_requests[0].url.startswith(f"{service.base_url}/pay/el_")
    assert "Pro" in probe.url_requests[0].message


@pytest.fixture
async def impatient_service(database_url: str) -> AsyncIterator[RunningService]:
    async with run_service(database_url, retry_wait_seconds=0.2) as running:
        yield running


async def first_round(client: Client) -> t.InputRequiredResult:
    result = await client.session.call_tool("sql_explain", QUERY, allow_input_required=True)
    assert isinstance(result, t.InputRequiredResult)
    return result


async def test_retry_before_payment_asks_again_with_the_same_link(impatient_service: RunningService) -> None:
    service = impatient_service
    await service.add_user("lea")
    token = (await service.personal_token("lea")).secret
    async with probed_client(service.mcp_url, token, ClientProbe()) as client:
        first = await first_round(client)
        url = payment_url(first)
        elicitation_id = url.rsplit("/", 1)[1]
        assert first.request_state and elicitation_id not in first.request_state, "request_state is sealed"

        again = await client.session.call_tool(
            "sql_explain",
            QUERY,
            allow_input_required=True,
            input_responses={"payment": t.ElicitResult(action="accept")},
            request_state=first.request_state,
        )
        assert isinstance(again, t.InputRequiredResult)
        assert payment_url(again) == url

        await pay(service, url, "lea")
        await service.sandbox.deliver_pending(within=10)
        done = await client.session.call_tool(
            "sql_explain",
            QUERY,
            allow_input_required=True,
            input_responses={"payment": t.ElicitResult(action="accept")},
            request_state=again.request_state,
        )
    assert isinstance(done, t.CallToolResult)
    assert not done.is_error
    [row] = await service.rows(Elicitation, id=elicitation_id)
    assert row.status == "completed" and row.protocol_era == "2026-07-28"


async def test_a_waiting_retry_is_released_by_the_webhook(service: RunningService) -> None:
    await service.add_user("max")
    token = (await service.personal_token("max")).secret
    async with probed_client(service.mcp_url, token, ClientProbe()) as client:
        first = await first_round(client)
        url = payment_url(first)
        retry = asyncio.create_task(
            client.session.call_tool(
                "sql_explain",
                QUERY,
                allow_input_required=True,
                input_responses={"payment": t.ElicitResult(action="accept")},
                request_state=first.request_state,
            )
        )
        await pay(service, url, "max")
        done = await retry
    assert isinstance(done, t.CallToolResult)
    assert not done.is_error


async def test_tampered_request_state_is_refused(service: RunningService) -> None:
    await service.add_user("ned")
    token = (await service.personal_token("ned")).secret
    async with probed_client(service.mcp_url, token, ClientProbe()) as client:
        first = await first_round(client)
        assert first.request_state is not None
        forged = first.request_state[:-4] + ("AAAA" if not first.request_state.endswith("AAAA") else "BBBB")
        with pytest.raises(MCPError) as raised:
            await client.session.call_tool(
                "sql_explain", QUERY, allow_input_required=True, request_state=forged
            )
    assert raised.value.code == -32602


async def test_a_client_without_url_elicitation_is_given_the_link_as_text(service: RunningService) -> None:
    """A 2026-07-28 client that declared its capabilities without URL elicitation could not act on
    an InputRequiredResult asking for one: it gets the link in a tool error, as in 2025-11-25."""
    await service.add_user("max")
    token = (await service.personal_token("max")).secret
    async with Client(bearer_transport(service.mcp_url, token), mode="2026-07-28") as client:
        paid = await client.call_tool("sql_explain", QUERY)
        portal = await client.call_tool("manage_billing", {})
    assert paid.is_error
    text = paid.content[0].text  # type: ignore[union-attr]
    assert f"{service.base_url}/pay/el_" in text and "call sql_explain again" in text
    assert not portal.is_error
    assert f"{service.base_url}/billing" in portal.content[0].text  # type: ignore[union-attr]
