"""Personal access tokens from the CLI, used by the SDK client in both protocol eras."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.paywall.pg_bus import PostgresBus
from tests.support.databases import DatabaseTemplates
from tests.support.mcp_http import post_initialize
from tests.support.oauth import refused_within_deadline
from tests.support.service import RunningService, run_service

REPO_ROOT = Path(__file__).resolve().parents[3]


async def cli(service: RunningService, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a real process, awaited: the service under test shares this event loop and must
    keep running (a blocking wait would freeze it mid-transaction and lock the CLI out)."""
    env = {
        **os.environ,
        "DATABASE_URL": service.settings.database_url,
        "PUBLIC_BASE_URL": service.settings.public_base_url,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service",
        *args,
        cwd=REPO_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    assert process.returncode is not None
    return subprocess.CompletedProcess(list(args), process.returncode, out.decode(), err.decode())


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_cli_user_and_token_work_with_the_sdk_client(service: RunningService, mode: str) -> None:
    created = await cli(service, "users", "create", "grace", "--password", "a long password")
    assert created.returncode == 0, created.stderr
    issued = await cli(service, "tokens", "create", "grace", "--label", "laptop")
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    assert token.startswith("mcp_pat_")
    assert token not in issued.stderr

    async with service.mcp_client(token, mode=mode) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        tools = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("whoami", {})
    assert {"whoami", "text_stats"} <= tools
    assert result.structured_content is not None
    assert result.structured_content["username"] == "grace"
    assert result.structured_content["client_id"] == "personal-access-token"


async def test_cli_revoke_stops_the_token(database_url: str) -> None:
    """The CLI is another process: with the default cache the server notices within TOKEN_CACHE_SECONDS."""
    async with run_service(database_url, token_cache_seconds=0) as service:
        await _revoke_with_the_cli(service)


async def _revoke_with_the_cli(service: RunningService) -> None:
    await service.add_user("heidi")
    issued = await cli(service, "tokens", "create", "heidi")
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    assert (await post_initialize(service, f"Bearer {token}"))[0] == 200
    token_id = issued.stderr.split("token id: ")[1].split()[0]
    listed = await cli(service, "tokens", "list", "heidi")
    assert token_id in listed.stdout and "active" in listed.stdout
    assert token not in listed.stdout

    revoked = await cli(service, "tokens", "revoke", token_id)
    assert revoked.returncode == 0, revoked.stderr
    assert "revoked" in (await cli(service, "tokens", "list", "heidi")).stdout
    status, headers = await post_initialize(service, f"Bearer {token}")
    assert status == 401
    assert "invalid_token" in headers["www-authenticate"]


async def test_cli_revoke_reaches_a_running_service_on_postgresql(
    pg_templates: DatabaseTemplates, tmp_path: Path
) -> None:
    """With the default token cache, the CLI's revocation still arrives at once, through NOTIFY."""
    async with run_service(pg_templates.fresh_url(tmp_path)) as service:
        assert isinstance(service.runtime.bus, PostgresBus)
        async with asyncio.timeout(10):
            await service.runtime.bus.listening.wait()
        await service.add_user("ivan")
        issued = await cli(service, "tokens", "create", "ivan")
        token = issued.stdout.strip()
        token_id = issued.stderr.split("token id: ")[1].split()[0]
        assert (await post_initialize(service, f"Bearer {token}"))[0] == 200  # now in the cache
        assert (await cli(service, "tokens", "revoke", token_id)).returncode == 0
        assert await refused_within_deadline(service, token)


def test_cli_reports_clear_errors(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "service", *args],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )

    assert run("migrate").returncode == 0
    assert run("users", "create", "ivan", "--password", "long enough").returncode == 0
    duplicate = run("users", "create", "ivan", "--password", "long enough")
    assert duplicate.returncode == 1 and "already exists" in duplicate.stderr
    short = run("users", "create", "judy", "--password", "short")
    assert short.returncode == 1 and "at least 8" in short.stderr
    missing = run("tokens", "create", "nobody")
    assert missing.returncode == 1 and "no user named" in missing.stderr
    unknown = run("tokens", "revoke", "tok_doesnotexist")
    assert unknown.returncode == 1
