"""Billing, its Stripe synchronisation included, imports nothing of the paywall or the MCP server
(issue 28): they subscribe to billing's events and implement its ports at wiring time instead."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BILLING = ROOT / "service" / "billing"
FORBIDDEN = ("service.paywall", "service.mcp_server")


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an import statement anywhere in `tree` names, with its line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            # `from service import paywall` names the package in the alias.
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def forbidden(module: str) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in FORBIDDEN)


def test_billing_imports_neither_the_paywall_nor_the_mcp_server() -> None:
    scanned = sorted(BILLING.rglob("*.py"))
    # The Stripe sync (webhook processor, applier, reconciler) is billing's too.
    assert BILLING / "stripe_sync" / "processor.py" in scanned
    assert BILLING / "stripe_sync" / "applier.py" in scanned
    offending = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in scanned
        for line, module in imported_modules(ast.parse(path.read_text(), str(path)))
        if forbidden(module)
    ]
    assert offending == []


def test_the_scan_sees_every_form_of_import() -> None:
    source = (
        "import service.paywall.bus\n"
        "from service.mcp_server.server import MCP_PATH\n"
        "from service import paywall\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from service.paywall.models import Elicitation\n"
        "def late():\n"
        "    from service.billing.plans import Plan\n"
    )
    modules = [module for _, module in imported_modules(ast.parse(source)) if forbidden(module)]
    assert modules == [
        "service.paywall.bus",
        "service.mcp_server.server.MCP_PATH",
        "service.paywall",
        "service.paywall.models.Elicitation",
    ]
