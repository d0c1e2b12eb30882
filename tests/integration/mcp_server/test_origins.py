"""Which browser origins may call /mcp: the public one always, this port's loopback names in
development (a local browser tool on localhost or [::1]), nothing else."""

from __future__ import annotations

import pytest

from tests.support.mcp_http import ACCEPT, INITIALIZE
from tests.support.service import RunningService


async def initialize_from(service: RunningService, origin: str, token: str) -> int:
    headers = {"Accept": ACCEPT, "Authorization": f"Bearer {token}", "Origin": origin}
    async with service.http() as http:
        return (await http.post("/mcp", headers=headers, json=INITIALIZE)).status_code


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
async def test_development_accepts_this_ports_loopback_origins(service: RunningService, host: str) -> None:
    await service.add_user("alice")
    token = (await service.personal_token("alice")).secret
    assert await initialize_from(service, f"http://{host}:{service.settings.http.port}", token) == 200


async def test_other_origins_are_refused(service: RunningService) -> None:
    await service.add_user("alice")
    token = (await service.personal_token("alice")).secret
    assert await initialize_from(service, "http://evil.example", token) == 403
    assert await initialize_from(service, f"http://localhost:{service.settings.http.port + 1}", token) == 403
