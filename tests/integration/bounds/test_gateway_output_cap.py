"""The tool-output cap holds for an upstream's tools served through the gateway too."""

from __future__ import annotations

from pathlib import Path

from tests.integration.gateway.test_gateway import PLANS, gateway_settings, text_of, user_token
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.service import run_service
from tests.support.upstream import upstream_host


async def test_an_upstream_result_over_the_cap_is_a_tool_error(database_url: str, tmp_path: Path) -> None:
    plans_file = tmp_path / "plans.toml"
    plans_file.write_text(PLANS, encoding="utf-8")
    async with upstream_host() as upstream, upstream.running():
        settings = gateway_settings(upstream, plans_file, max_tool_output_bytes=2048)
        async with run_service(database_url, **settings) as service:
            token = await user_token(service, "gwcap")
            async with probed_client(service.mcp_url, token, ClientProbe()) as client:
                small = await client.call_tool("echo", {"text": "hi"})
                big = await client.call_tool("echo", {"text": "x" * 4096})
    assert not small.is_error and text_of(small) == "echo: hi"
    assert big.is_error
    assert "over this service's limit of 2048 bytes" in text_of(big)
