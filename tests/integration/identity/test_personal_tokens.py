"""Personal access tokens from the CLI, used by the SDK client in both protocol eras."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from service.identity.models import Token
from service.paywall.pg_bus import PostgresBus
from tests.support.browserless import log_in_through_form
from tests.support.databases import DatabaseTemplates
from tests.support.mcp_http import post_initialize
from tests.support.oauth import refused_within_deadline
from tests.support.service import DEFAULT_PASSWORD, RunningService, run_service

REPO_ROOT = Path(__file__).resolve().parents[3]


async def cli(service: RunningService, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The CLI as a real process, awaited: the service under test shares this event loop and must
    keep running (a blocking wait would freeze it mid-transaction and lock the CLI out)."""
    env = {
        **os.environ,
        "DATABASE_URL": service.settings.database.url,
        "PUBLIC_BASE_URL": service.settings.http.public_base_url,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service",
        *args,
        cwd=REPO_ROOT,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate(stdin.encode())
    assert process.returncode is not None
    return subprocess.CompletedProcess(list(args), process.returncode, out.decode(), err.decode())


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_cli_user_and_token_work_with_the_sdk_client(service: RunningService, mode: str) -> None:
    created = await cli(service, "users", "create", "grace", "--password-stdin", stdin="a long password\n")
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

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "service", *args],
            cwd=REPO_ROOT,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )

    unmigrated = run("users", "list")
    assert unmigrated.returncode == 2 and "the database is not migrated" in unmigrated.stderr
    assert "Traceback" not in unmigrated.stderr
    assert run("migrate").returncode == 0
    assert run("users", "create", "ivan", "--password-stdin", stdin="long enough\n").returncode == 0
    long_label = run("tokens", "create", "ivan", "--label", "x" * 201)
    assert long_label.returncode == 2 and "labels have at most 200 characters" in long_label.stderr
    tabbed = run("tokens", "create", "ivan", "--label", "a\tb")
    assert tabbed.returncode == 2 and "control characters" in tabbed.stderr
    duplicate = run("users", "create", "ivan", "--password-stdin", stdin="long enough\n")
    assert duplicate.returncode == 1 and "already exists" in duplicate.stderr
    short = run("users", "create", "judy", "--password-stdin", stdin="short\n")
    assert short.returncode == 1 and "at least 8" in short.stderr
    # Never on the command line, and no silent read of a pipe without --password-stdin.
    on_argv = run("users", "create", "judy", "--password", "long enough")
    assert on_argv.returncode == 2 and "unrecognized arguments" in on_argv.stderr
    no_tty = run("users", "create", "judy", stdin="long enough\n")
    assert no_tty.returncode == 1 and "--password-stdin" in no_tty.stderr
    missing = run("tokens", "create", "nobody")
    assert missing.returncode == 1 and "no user named" in missing.stderr
    unknown = run("tokens", "revoke", "tok_doesnotexist")
    assert unknown.returncode == 1


async def test_personal_tokens_expire_by_default(service: RunningService) -> None:
    await service.add_user("kim")
    default = await cli(service, "tokens", "create", "kim")
    forever = await cli(service, "tokens", "create", "kim", "--never-expires")
    short = await cli(service, "tokens", "create", "kim", "--expires-in-days", "7")
    assert default.returncode == forever.returncode == short.returncode == 0, default.stderr
    expiries = {token.id: token.expires_at for token in await service.rows(Token, kind="personal")}
    now = datetime.now(UTC)
    default_expiry, short_expiry = expiries[_token_id(default)], expiries[_token_id(short)]
    assert default_expiry is not None
    assert timedelta(days=89) < default_expiry - now <= timedelta(days=90)
    assert expiries[_token_id(forever)] is None
    assert short_expiry is not None
    assert timedelta(days=6) < short_expiry - now <= timedelta(days=7)
    both = await cli(service, "tokens", "create", "kim", "--never-expires", "--expires-in-days", "7")
    assert both.returncode == 2


async def test_cli_lists_disables_and_resets_users(service: RunningService) -> None:
    await service.add_user("lee")
    issued = await cli(service, "tokens", "create", "lee")
    token = issued.stdout.strip()
    assert (await post_initialize(service, f"Bearer {token}"))[0] == 200
    assert "lee\tactive" in (await cli(service, "users", "list")).stdout

    disabled = await cli(service, "users", "disable", "lee")
    assert disabled.returncode == 0, disabled.stderr
    assert "lee\tdisabled" in (await cli(service, "users", "list")).stdout
    assert "revoked" in (await cli(service, "tokens", "list", "lee")).stdout
    users = json.loads((await cli(service, "users", "list", "--json")).stdout)
    assert [(user["username"], user["state"]) for user in users] == [("lee", "disabled")]
    tokens = json.loads((await cli(service, "tokens", "list", "lee", "--json")).stdout)
    assert [token["state"] for token in tokens] == ["revoked"]
    async with service.http() as http:
        refused = await log_in_through_form(http, "/login?next=/account", "lee", DEFAULT_PASSWORD)
    assert refused.status_code == 401

    reset = await cli(
        service, "users", "set-password", "lee", "--password-stdin", stdin="a new long password\n"
    )
    assert reset.returncode == 0, reset.stderr
    async with service.http() as http:
        signed_in = await log_in_through_form(http, "/login?next=/account", "lee", "a new long password")
    assert signed_in.status_code == 303


def _token_id(created: subprocess.CompletedProcess[str]) -> str:
    return created.stderr.split("token id: ")[1].split()[0]
