"""The service without its optional `sandbox` extra: a child interpreter in which `stripe_sandbox`
cannot be imported (`sys.modules["stripe_sandbox"] = None`, as if it were not installed).

Every module of the service still imports; settings that ask for the embedded sandbox are refused
with one line naming the extra, never an ImportError traceback; others are not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

WITHOUT_SANDBOX = "import sys\nsys.modules['stripe_sandbox'] = None\n"
EXTRA = "pip install 'paid-mcp-service[sandbox]'"


def run_without_sandbox(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`code` in a child interpreter without the sandbox, in `tmp_path` (no `.env` there)."""
    clean = {name: value for name, value in os.environ.items() if not name.startswith("STRIPE_")}
    clean.update(DATABASE_URL=f"sqlite:///{tmp_path / 'service.db'}", PORT="1", **env)
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_SANDBOX + code],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_service_module_imports_without_the_sandbox(tmp_path: Path) -> None:
    done = run_without_sandbox(
        "import pkgutil, importlib, service\n"
        "for module in pkgutil.walk_packages(service.__path__, 'service.'):\n"
        "    if not module.name.endswith('__main__'):\n"
        "        importlib.import_module(module.name)\n"
        "from service.billing.embedded_sandbox import SANDBOX_INSTALLED\n"
        "print(SANDBOX_INSTALLED)\n",
        tmp_path,
    )
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "False", "")


@pytest.mark.parametrize("command", [["serve"], ["stripe", "sandbox", "--port", "0"]])
def test_asking_for_the_sandbox_names_the_extra(tmp_path: Path, command: list[str]) -> None:
    done = run_without_sandbox(f"from service.cli import main\nsys.exit(main({command!r}))\n", tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("configuration error: the built-in Stripe sandbox is not installed")
    assert EXTRA in done.stderr
    assert "Traceback" not in done.stderr


def test_the_lifespan_refuses_the_embedded_sandbox_with_the_same_message(tmp_path: Path) -> None:
    """For an app built by other code than `serve` (which refuses before building it)."""
    done = run_without_sandbox(
        "import asyncio\n"
        "from service.billing.embedded_sandbox import SandboxNotInstalled, embedded_sandbox\n"
        "from service.settings import Settings\n"
        "async def start():\n"
        "    settings = Settings()\n"
        "    async with embedded_sandbox(\n"
        "        settings.stripe_sandbox, settings.stripe, settings.http.internal_base_url\n"
        "    ):\n"
        "        pass\n"
        "try:\n"
        "    asyncio.run(start())\n"
        "except SandboxNotInstalled as exc:\n"
        "    print(exc)\n",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert EXTRA in done.stdout


def test_a_real_stripe_key_needs_no_sandbox(tmp_path: Path) -> None:
    done = run_without_sandbox(
        "from service.billing.embedded_sandbox import sandbox_problem\n"
        "from service.settings import Settings\n"
        "print(sandbox_problem(Settings().stripe))\n",
        tmp_path,
        STRIPE_SECRET_KEY="sk_test_not_the_sandbox",
    )
    assert (done.returncode, done.stdout.strip()) == (0, "None"), done.stderr
