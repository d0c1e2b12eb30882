"""The server names itself with the installed package's version, in both protocol eras."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from tests.support.service import RunningService


@pytest.mark.parametrize(("mode", "protocol"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_server_info_carries_the_package_version(
    service: RunningService, mode: str, protocol: str
) -> None:
    """`auto` negotiates through `server/discover`, whose result carries the 2026-era stamp."""
    await service.add_user("alice")
    issued = await service.personal_token("alice")
    async with service.mcp_client(issued.secret, mode=mode) as client:
        info = client.server_info
        assert client.protocol_version == protocol
    assert info is not None
    assert info.name == service.settings.mcp.server_name
    assert info.version == version("paid-mcp-service")
