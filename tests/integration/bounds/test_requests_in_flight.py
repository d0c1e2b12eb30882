"""One user's `/mcp` requests in flight are capped per replica (`MAX_MCP_REQUESTS_IN_FLIGHT_PER_USER`):
the request past the cap is answered 429 at once, other users go on, and the place comes back when
a call ends. The calls held in flight are the gateway's upstream `hang` tool, which waits until the
test releases it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_types import INVALID_REQUEST

from service.mcp_server.server import McpHttp
from tests.integration.gateway.test_gateway import PLANS, gateway_settings, text_of, user_token
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.mcp_http import legacy_session
from tests.support.polling import until
from tests.support.service import RunningService, run_service
from tests.support.upstream import upstream_host

CAP = 2


@pytest.fixture
def plans_file(tmp_path: Path) -> Path:
    path = tmp_path / "plans.toml"
    path.write_text(PLANS, encoding="utf-8")
    return path


def modern_call(name: str, arguments: dict[str, Any], request_id: int = 1) -> dict[str, Any]:
    """A sessionless 2026-07-28 `tools/call`, as a client sends it."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }


async def post_call(service: RunningService, token: str, name: str, arguments: dict[str, Any]) -> Any:
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    async with service.http() as http:
        return await http.post("/mcp", headers=headers, json=modern_call(name, arguments))


async def test_a_request_past_the_users_cap_is_429_and_others_go_on(
    database_url: str, plans_file: Path
) -> None:
    async with upstream_host() as upstream, upstream.running():
        settings = gateway_settings(upstream, plans_file, max_mcp_requests_in_flight_per_user=CAP)
        async with run_service(database_url, **settings) as service:
            busy = await user_token(service, "busy")
            other = await user_token(service, "other")
            finished: list[str] = []

            async def hang(era: str) -> None:
                async with probed_client(service.mcp_url, busy, ClientProbe(), mode=era) as client:
                    finished.append(text_of(await client.call_tool("hang", {})))

            async with anyio.create_task_group() as group:
                # One call in a 2025-11-25 session, one sessionless: the cap counts both eras.
                group.start_soon(hang, "legacy")
                group.start_soon(hang, "auto")
                with anyio.fail_after(30):
                    await upstream.hanging.reached(CAP)
                refused = await post_call(service, busy, "echo", {"text": "one more"})
                others = await post_call(service, other, "echo", {"text": "not me"})
                upstream.release.set()
            again = await post_call(service, busy, "echo", {"text": "my turn"})

    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert error["code"] == INVALID_REQUEST and f"at most {CAP} at a time" in error["message"]
    assert others.status_code == 200 and "echo: not me" in others.text, "another user is not affected"
    assert finished == ["released", "released"], "the calls in flight were not disturbed"
    assert again.status_code == 200 and "echo: my turn" in again.text, "the places came back"


async def test_a_legacy_call_the_client_hung_up_on_counts_until_it_ends(
    database_url: str, plans_file: Path
) -> None:
    async with upstream_host() as upstream, upstream.running():
        settings = gateway_settings(upstream, plans_file, max_mcp_requests_in_flight_per_user=1)
        async with run_service(database_url, **settings) as service:
            user = await service.add_user("hangs-up")
            token = (await service.personal_token("hangs-up")).secret
            mcp_http: McpHttp = service.app.state.mcp_http
            headers = await legacy_session(service, token)
            session_id = headers["Mcp-Session-Id"]
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "hang", "arguments": {}},
            }
            async with (
                service.http() as http,
                http.stream("POST", "/mcp", headers=headers, json=call) as answer,
            ):
                assert answer.status_code == 200
                with anyio.fail_after(30):
                    await upstream.hanging.reached(1)
            # Leaving the stream unread closed its connection: the client hung up while `hang` waits.

            async def post_ended() -> bool:
                return mcp_http.sessions.requests_in_flight(session_id) == 0

            await until(post_ended, "the service saw the hung-up POST end")
            refused = await post_call(service, token, "echo", {"text": "one more"})
            upstream.release.set()

            async def call_ended() -> bool:
                return mcp_http.in_flight.count(user.id) == 0

            await until(call_ended, "the hung-up call ended and gave its place back")
            again = await post_call(service, token, "echo", {"text": "my turn"})

    assert refused.status_code == 429, "the hung-up call still runs, so it still counts"
    assert again.status_code == 200 and "echo: my turn" in again.text, "its place came back when it ended"
