"""A vendor's tool package, named in settings, served next to ours and paywalled by the plans file."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import MCPError, UrlElicitationRequiredError

from service.app import create_app
from service.billing.plans import DEFAULT_PLANS_FILE, PlanCatalogError
from tests.support.cli import run_cli
from tests.support.mcp_clients import ClientProbe, probed_client
from tests.support.payment import pay
from tests.support.service import RunningService, make_settings, run_service

REPO_ROOT = Path(__file__).resolve().parents[3]
PACKAGES = "service.example_tools:tools,tests.fixtures.vendor_tools:tools"


@pytest.fixture
async def vendor_service(database_url: str) -> AsyncIterator[RunningService]:
    async with run_service(database_url, tool_packages=PACKAGES) as running:
        yield running


async def test_vendor_tools_are_served_and_paywalled(vendor_service: RunningService) -> None:
    service = vendor_service
    await service.add_user("vic")
    token = (await service.personal_token("vic")).secret
    probe = ClientProbe()
    async with probed_client(service.mcp_url, token, probe, mode="legacy") as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"vendor_hello", "vendor_reverse", "ascii_chart"} <= names
        hello = await client.call_tool("vendor_hello", {"name": "Vic"})
        assert hello.content[0].text == "Hello, Vic, from the vendor."  # type: ignore[union-attr]
        with pytest.raises(MCPError) as raised:
            await client.call_tool("vendor_reverse", {"text": "abc"})
        [elicitation] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
        assert "Team" in elicitation.message
        await pay(service, elicitation.url, "vic")
        assert await probe.wait_for_completion() == elicitation.elicitation_id
        reversed_text = await client.call_tool("vendor_reverse", {"text": "abc"})
    assert reversed_text.content[0].text == "cba"  # type: ignore[union-attr]


async def test_sync_tools_run_in_worker_threads_off_the_event_loop(vendor_service: RunningService) -> None:
    """A vendor's sync tool, free or paid, runs in a worker thread (service/tool_threads.py)."""
    service = vendor_service
    await service.add_user("wes")
    token = (await service.personal_token("wes")).secret
    async with probed_client(service.mcp_url, token, ClientProbe(), mode="legacy") as client:
        answer = await client.call_tool("vendor_whereabouts", {})
        stats = await client.call_tool("text_stats", {"text": "to be or not to be"})
    where = answer.structured_content
    assert where is not None
    assert where["on_event_loop"] is False
    assert where["thread"] != threading.main_thread().name
    assert stats.structured_content is not None
    assert stats.structured_content["words"] == 6


async def test_serve_refuses_a_broken_tool_package_in_one_line(tmp_path: Path) -> None:
    env = {
        "TOOL_PACKAGES": "tests.fixtures.vendor_tools:unknown_plan",
        "DATABASE_URL": f"sqlite:///{tmp_path / 's.db'}",
    }
    done = await run_cli("serve", "--port", "0", env=env)
    assert done.returncode == 2
    assert "configuration error: paid tool 'shiny'" in done.stderr
    assert "Traceback" not in done.stderr


def plans_selling(path: Path, tool: str) -> Path:
    """The default plans plus one that lists `tool`."""
    path.write_text(
        DEFAULT_PLANS_FILE.read_text(encoding="utf-8")
        + f'\n[[plans]]\nid = "extra"\nname = "Extra"\nlookup_key = "extra_monthly"\namount = 100\n'
        f'currency = "usd"\ninterval = "month"\ntools = ["ascii_chart", "{tool}"]\n',
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("tool", "complaint"),
    [
        ("text_stats", "plan 'extra' lists tool 'text_stats', which is declared free"),
        ("no_such_tool", "plan 'extra' lists tool 'no_such_tool', which no tool package or upstream serves"),
    ],
    ids=["free", "missing"],
)
async def test_serve_refuses_a_plan_selling_a_free_or_missing_tool(
    tmp_path: Path, tool: str, complaint: str
) -> None:
    env = {
        "PLANS_FILE": str(plans_selling(tmp_path / "plans.toml", tool)),
        "DATABASE_URL": f"sqlite:///{tmp_path / 's.db'}",
    }
    done = await run_cli("serve", "--port", "0", env=env)
    assert done.returncode == 2, done.stderr
    assert f"configuration error: {complaint}" in done.stderr
    assert "Traceback" not in done.stderr


async def test_the_lifespan_refuses_a_plan_selling_a_free_tool(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(database_url, 8999, plans_file=plans_selling(tmp_path / "plans.toml", "whoami"))
    app = create_app(settings)
    with pytest.raises(PlanCatalogError, match="plan 'extra' lists tool 'whoami'"):
        async with app.router.lifespan_context(app):
            pass
