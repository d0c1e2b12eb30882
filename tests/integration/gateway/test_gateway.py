"""Gateway mode end to end: a real upstream MCP server, our service in front, real SDK clients.

The upstream (tests/support/upstream.py) records every request it receives, so these tests check
what crossed the wire, not what our code meant to send.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import mcp_types as t
import pytest
from mcp import MCPError, UrlElicitationRequiredError

from service.app import create_app
from service.gateway.signing import USER_HEADER, InvalidUserHeader, verify_user_header
from service.gateway.tools import ToolNameCollision, UnclassifiedTools
from service.gateway.upstream import UpstreamUnavailable
from service.identity.models import User
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.mcp_http import legacy_session
from tests.support.payment import pay
from tests.support.service import RunningService, make_settings, run_service
from tests.support.upstream import UPSTREAM_CREDENTIAL, USER_HEADER_SECRET, UpstreamHost, upstream_host

# Every upstream tool but `unclassified_admin` (and `premium_report`, which a plan sells).
FREE_UPSTREAM_TOOLS = [
    *["echo", "count_slowly", "explode", "refuse", "hang", "signed_user"],
    *["padded", "big_text", "chatter"],  # oversize answers, for tests/integration/bounds
]
ERAS = ["legacy", "auto"]  # 2025-11-25 sessions, and the sessionless 2026-07-28 the client negotiates

PLANS = """
[[plans]]
id = "pro"
name = "Pro"
lookup_key = "gw_pro_monthly"
amount = 900
currency = "usd"
interval = "month"
tools = ["premium_report", "ascii_chart", "sql_explain"]

[[plans]]
id = "team"
name = "Team"
lookup_key = "gw_team_monthly"
amount = 2900
currency = "usd"
interval = "month"
tools = ["ascii_chart", "sql_explain", "password_audit"]
"""


@pytest.fixture
def plans_file(tmp_path: Path) -> Path:
    path = tmp_path / "plans.toml"
    path.write_text(PLANS, encoding="utf-8")
    return path


@pytest.fixture
async def upstream() -> AsyncIterator[UpstreamHost]:
    async with upstream_host() as host:
        yield host


def gateway_settings(upstream: UpstreamHost, plans_file: Path, **overrides: object) -> dict[str, object]:
    return {
        "plans_file": plans_file,
        "upstream_mcp_url": upstream.url,
        "upstream_mcp_authorization": UPSTREAM_CREDENTIAL,
        "upstream_user_header_secret": USER_HEADER_SECRET,
        "upstream_free_tools": ",".join(FREE_UPSTREAM_TOOLS),
        **overrides,
    }


@pytest.fixture
async def gateway(
    database_url: str, upstream: UpstreamHost, plans_file: Path
) -> AsyncIterator[RunningService]:
    async with (
        upstream.running(),
        run_service(database_url, **gateway_settings(upstream, plans_file)) as running,
    ):
        yield running


async def user_token(service: RunningService, name: str) -> str:
    await service.add_user(name)
    return (await service.personal_token(name)).secret


def text_of(result: t.CallToolResult) -> str:
    assert isinstance(result.content[0], t.TextContent), result
    return result.content[0].text


@pytest.mark.parametrize("mode", ERAS)
async def test_lists_upstream_tools_with_their_schemas(
    gateway: RunningService, upstream: UpstreamHost, mode: str
) -> None:
    token = await user_token(gateway, "lis")
    async with probed_client(gateway.mcp_url, token, ClientProbe(), mode=mode) as client:
        ours = {tool.name: tool for tool in (await client.list_tools()).tools}
    async with probed_client(upstream.url, "unused", ClientProbe(), mode=mode) as direct:
        theirs = {tool.name: tool for tool in (await direct.list_tools()).tools}
    assert "unclassified_admin" in theirs and "unclassified_admin" not in ours, "unclassified: not served"
    del theirs["unclassified_admin"]
    for name, tool in theirs.items():
        assert name in ours, name
        mine = ours[name]
        assert mine.description == tool.description
        assert mine.title == tool.title
        assert mine.input_schema == tool.input_schema
        assert mine.output_schema == tool.output_schema
        assert mine.annotations == tool.annotations
    assert ours["echo"].title == "Echo" and ours["echo"].annotations.read_only_hint  # type: ignore[union-attr]
    assert ours["premium_report"].output_schema is not None
    assert "whoami" in ours and "billing_status" in ours, "our own tools are still served"


@pytest.mark.parametrize("mode", ERAS)
async def test_free_tool_is_forwarded_with_the_upstreams_credential_and_never_our_token(
    gateway: RunningService, upstream: UpstreamHost, mode: str
) -> None:
    token = await user_token(gateway, "fay")
    async with probed_client(gateway.mcp_url, token, ClientProbe(), mode=mode) as client:
        result = await client.call_tool("echo", {"text": "hi there"})
        named = await client.call_tool("signed_user", {})
    assert not result.is_error, result
    assert text_of(result) == "echo: hi there"
    [user] = await gateway.rows(User, username="fay")
    assert text_of(named) == user.id, "the upstream verified the signed header and found our user"

    calls = upstream.recorder.tool_calls()
    assert len(calls) == 2
    for seen in upstream.recorder.requests:
        assert token not in str(seen.headers) and token.encode() not in seen.body, "token passthrough"
        assert seen.headers.get("authorization") == UPSTREAM_CREDENTIAL
    assert upstream.recorder.verified_users() == [user.id, user.id], "each header signed for its own call"
    echo_header = calls[0].headers[USER_HEADER.lower()]
    with pytest.raises(InvalidUserHeader):  # a captured header does not run another tool
        verify_user_header(
            USER_HEADER_SECRET, echo_header, tool_name="premium_report", arguments={"text": "hi there"}
        )
    with pytest.raises(InvalidUserHeader):  # nor the same tool with other arguments
        verify_user_header(USER_HEADER_SECRET, echo_header, tool_name="echo", arguments={"text": "rm -rf"})


async def test_paid_tool_legacy_32042_then_payment_then_forwarded(
    gateway: RunningService, upstream: UpstreamHost
) -> None:
    token = await user_token(gateway, "pia")
    probe = ClientProbe()
    async with probed_client(gateway.mcp_url, token, probe, mode="legacy") as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("premium_report", {"text": "quarterly numbers"})
        assert raised.value.code == -32042
        [elicitation] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
        assert elicitation.url.startswith(f"{gateway.base_url}/pay/el_")
        assert "Pro" in elicitation.message
        assert upstream.recorder.tool_calls() == [], "an unentitled call never reaches the upstream"

        await pay(gateway, elicitation.url, "pia")
        assert await probe.wait_for_completion() == elicitation.elicitation_id
        result = await client.call_tool("premium_report", {"text": "quarterly numbers"})
        status = await client.call_tool("billing_status", {})
    assert not result.is_error, result
    assert result.structured_content == {"words": 2, "shout": "QUARTERLY NUMBERS"}
    assert len(upstream.recorder.tool_calls()) == 1
    assert "Pro" in text_of(status)


async def test_paid_tool_modern_input_required_then_payment_then_forwarded(
    gateway: RunningService, upstream: UpstreamHost
) -> None:
    token = await user_token(gateway, "mo")

    async def pay_then_accept(params: t.ElicitRequestURLParams) -> t.ElicitResult:
        assert upstream.recorder.tool_calls() == [], "an unentitled call never reaches the upstream"
        await pay(gateway, params.url, "mo")
        return t.ElicitResult(action="accept")

    probe = ClientProbe(answer=pay_then_accept)
    async with probed_client(gateway.mcp_url, token, probe) as client:
        assert client.protocol_version == "2026-07-28"
        first = await client.session.call_tool("premium_report", {"text": "a b c"}, allow_input_required=True)
        assert isinstance(first, t.InputRequiredResult)
        result = await client.call_tool("premium_report", {"text": "a b c"})
    assert not result.is_error, result
    assert result.structured_content == {"words": 3, "shout": "A B C"}
    assert len(probe.url_requests) == 1
    assert len(upstream.recorder.tool_calls()) == 1


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_is_relayed_to_our_caller(gateway: RunningService, mode: str) -> None:
    token = await user_token(gateway, "pro")
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with probed_client(gateway.mcp_url, token, ClientProbe(), mode=mode) as client:
        result = await client.call_tool("count_slowly", {"n": 3}, progress_callback=on_progress)
    assert text_of(result) == "counted to 3"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


@pytest.mark.parametrize("mode", ERAS)
async def test_upstream_errors_reach_the_caller_as_errors(gateway: RunningService, mode: str) -> None:
    token = await user_token(gateway, "err")
    async with probed_client(gateway.mcp_url, token, ClientProbe(), mode=mode) as client:
        failed = await client.call_tool("explode", {})
        refused = await client.call_tool("refuse", {})
        still_fine = await client.call_tool("echo", {"text": "ok"})
    assert failed.is_error and "kaboom" in text_of(failed), "the upstream's isError result, unchanged"
    assert refused.is_error
    assert "refused by the vendor" in text_of(refused) and "-32602" in text_of(refused)
    assert text_of(still_fine) == "echo: ok"


@pytest.mark.parametrize("mode", ERAS)
async def test_upstream_down_then_back(
    database_url: str, upstream: UpstreamHost, plans_file: Path, mode: str
) -> None:
    async with upstream.running():
        service_cm = run_service(database_url, **gateway_settings(upstream, plans_file))
        service = await service_cm.__aenter__()
    try:
        token = await user_token(service, "dan")
        async with probed_client(service.mcp_url, token, ClientProbe(), mode=mode) as client:
            down = await client.call_tool("echo", {"text": "anyone?"})
            assert down.is_error and "unreachable" in text_of(down), down
            async with upstream.running():
                back = await client.call_tool("echo", {"text": "back"})
            assert text_of(back) == "echo: back"
    finally:
        await service_cm.__aexit__(None, None, None)


async def test_upstream_timeout_is_bounded(
    database_url: str, upstream: UpstreamHost, plans_file: Path
) -> None:
    settings = gateway_settings(upstream, plans_file, upstream_timeout_seconds=1.0)
    async with upstream.running(), run_service(database_url, **settings) as service:
        token = await user_token(service, "tim")
        async with probed_client(service.mcp_url, token, ClientProbe()) as client:
            result = await client.call_tool("hang", {})
        upstream.release.set()
    assert result.is_error and "within 1 s" in text_of(result)


async def test_a_slow_tool_listing_at_startup_gets_more_than_the_call_bound(
    database_url: str, plans_file: Path
) -> None:
    async with upstream_host(first_list_delay_seconds=1.5) as slow, slow.running():
        settings = gateway_settings(slow, plans_file, upstream_timeout_seconds=1.0)
        async with run_service(database_url, **settings) as service:
            token = await user_token(service, "sly")
            async with probed_client(service.mcp_url, token, ClientProbe()) as client:
                result = await client.call_tool("echo", {"text": "started"})
    assert text_of(result) == "echo: started"


async def test_unreachable_upstream_at_startup_is_a_clear_error(
    database_url: str, upstream: UpstreamHost, plans_file: Path
) -> None:
    settings = make_settings(database_url, 8999, **gateway_settings(upstream, plans_file))
    app = create_app(settings)
    with pytest.raises(
        UpstreamUnavailable, match=f"cannot list the tools of the upstream MCP server {upstream.url}"
    ):
        async with app.router.lifespan_context(app):
            pass


async def test_name_collision_with_a_local_tool_is_a_startup_error(
    database_url: str, plans_file: Path
) -> None:
    async with upstream_host(extra_tool="whoami") as clashing, clashing.running():
        free = ",".join([*FREE_UPSTREAM_TOOLS, "whoami"])
        settings = make_settings(
            database_url, 8999, **gateway_settings(clashing, plans_file, upstream_free_tools=free)
        )
        app = create_app(settings)
        with pytest.raises(ToolNameCollision, match="whoami"):
            async with app.router.lifespan_context(app):
                pass


@pytest.mark.parametrize("mode", ERAS)
async def test_concurrent_calls_of_two_users_each_carry_their_own_user(
    gateway: RunningService, mode: str
) -> None:
    tokens = {name: await user_token(gateway, name) for name in ("uma", "ulf")}
    ids = {name: (await gateway.rows(User, username=name))[0].id for name in tokens}

    async def call_as(name: str) -> list[str]:
        async with probed_client(gateway.mcp_url, tokens[name], ClientProbe(), mode=mode) as client:
            results = await asyncio.gather(*(client.call_tool("signed_user", {}) for _ in range(5)))
        return [text_of(result) for result in results]

    uma, ulf = await asyncio.gather(call_as("uma"), call_as("ulf"))
    assert uma == [ids["uma"]] * 5
    assert ulf == [ids["ulf"]] * 5


@pytest.mark.parametrize("mode", ERAS)
async def test_an_unclassified_upstream_tool_is_not_served(
    gateway: RunningService, upstream: UpstreamHost, mode: str
) -> None:
    token = await user_token(gateway, "una")
    async with probed_client(gateway.mcp_url, token, ClientProbe(), mode=mode) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        try:
            result = await client.call_tool("unclassified_admin", {})
        except MCPError as exc:
            refusal = exc.error.message
        else:
            assert result.is_error, result
            refusal = text_of(result)
    assert "unclassified_admin" not in names
    assert "unclassified_admin" in refusal and "ran" not in refusal
    assert upstream.recorder.tool_calls() == [], "nothing reached the upstream"


async def test_a_tool_both_free_and_sold_is_a_startup_error(
    database_url: str, upstream: UpstreamHost, plans_file: Path
) -> None:
    free = ",".join([*FREE_UPSTREAM_TOOLS, "premium_report"])
    settings = make_settings(
        database_url, 8999, **gateway_settings(upstream, plans_file, upstream_free_tools=free)
    )
    app = create_app(settings)
    async with upstream.running():
        with pytest.raises(UnclassifiedTools, match="premium_report"):
            async with app.router.lifespan_context(app):
                pass


@pytest.mark.parametrize("number", ["NaN", "-Infinity", "1e400"])
async def test_a_number_that_is_not_finite_is_a_parse_error_never_forwarded(
    gateway: RunningService, upstream: UpstreamHost, number: str
) -> None:
    """Forwarded, the upstream would refuse the call and the caller hear "upstream unreachable"."""
    token = await user_token(gateway, "nan-sender")
    legacy_headers = await legacy_session(gateway, token)
    modern_headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "echo",
    }
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    arguments = {"text": "hi", "n": "__NUMBER__"}
    legacy = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": arguments},
    }
    modern = {**legacy, "params": {"name": "echo", "arguments": arguments, "_meta": meta}}
    async with gateway.http() as http:
        answers = [
            await http.post("/mcp", content=json.dumps(body).replace('"__NUMBER__"', number), headers=headers)
            for body, headers in ((legacy, legacy_headers), (modern, modern_headers))
        ]
    assert [(answer.status_code, answer.json()["error"]["code"]) for answer in answers] == [(400, -32700)] * 2
    assert upstream.recorder.tool_calls() == []
