"""The service uses only the public names of its dependencies; workarounds live in `service/compat/`.

An AST scan of service/ and stripe_sandbox/ refuses, outside service/compat/:
- importing from a third-party module path with a `_`-prefixed component (`mcp.server._otel`), or
  importing a `_`-prefixed name from a third-party module;
- reading or writing `<something>._name` where `<something>` is not `self` or `cls`, not one of our
  own modules, and `_name` is not defined in the same file (another instance of the same class,
  `other._sessions`). A few of our own private helpers used across modules are listed below.
Docstrings and comments may mention private names: only code is scanned.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[2] / "service"
SANDBOX = SERVICE.parent / "stripe_sandbox"
COMPAT = SERVICE / "compat"
OURS = ("service", "stripe_sandbox")

# Our own private helpers, used by a module other than the one defining them: (file, name).
OWN_PRIVATE_USES: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _third_party(module: str) -> bool:
    top = module.split(".", 1)[0]
    return top not in (*OURS, "__future__") and top not in sys.stdlib_module_names


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _defined_private_names(tree: ast.AST) -> set[str]:
    """`_names` this file defines: functions, classes, variables, and attributes it assigns."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {name for name in names if _private(name)}


def _own_module_aliases(tree: ast.AST) -> set[str]:
    """Local names bound to our own modules or their members (`from service.x import y as m`,
    `import service.x`, `from . import billing`)."""
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".", 1)[0] in OURS:
                    aliases.add(alias.asname or alias.name.split(".", 1)[0])
        elif isinstance(node, ast.ImportFrom) and (
            node.level > 0 or (node.module and node.module.split(".", 1)[0] in OURS)
        ):
            aliases.update(alias.asname or alias.name for alias in node.names)
    return aliases


def scan(source: str, path: str) -> list[Finding]:
    tree = ast.parse(source, filename=path)
    findings: list[Finding] = []
    defined = _defined_private_names(tree)
    own_modules = _own_module_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _third_party(alias.name) and any(_private(part) for part in alias.name.split(".")):
                    findings.append(Finding(path, node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not _third_party(node.module):
                continue
            if any(_private(part) for part in node.module.split(".")):
                findings.append(Finding(path, node.lineno, f"from {node.module} import ..."))
            for alias in node.names:
                if _private(alias.name):
                    findings.append(Finding(path, node.lineno, f"from {node.module} import {alias.name}"))
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and (base.id in ("self", "cls") or base.id in own_modules):
                continue
            if node.attr in defined or (path, node.attr) in OWN_PRIVATE_USES:
                continue
            findings.append(Finding(path, node.lineno, f"{ast.unparse(node)}"))
    return findings


def service_findings() -> list[Finding]:
    findings: list[Finding] = []
    for file in sorted([*SERVICE.rglob("*.py"), *SANDBOX.rglob("*.py")]):
        if COMPAT in file.parents:
            continue
        path = str(file.relative_to(SERVICE.parent))
        findings.extend(scan(file.read_text(encoding="utf-8"), path))
    return findings


def test_the_service_uses_only_public_names_of_its_dependencies() -> None:
    findings = service_findings()
    assert not findings, "private names of dependencies outside service/compat/:\n" + "\n".join(
        map(str, findings)
    )


@pytest.mark.parametrize(
    "source",
    [
        "from mcp.server._otel import OpenTelemetryMiddleware",
        "import stripe._api_version",
        "from stripe import _api_version",
        "lowlevel = server._lowlevel_server",
        "tools = mcp._tool_manager._tools",
        "async def f(conn):\n    raw = await conn.get_raw_connection()\n"
        "    return raw.driver_connection._connection",
        "app._server_instances.clear()",
        "def f(server):\n    server._lowlevel_server.get_tool_input_schema = None",
    ],
)
def test_private_names_of_dependencies_are_caught(source: str) -> None:
    assert scan(source, "sample.py"), source


@pytest.mark.parametrize(
    "source",
    [
        '"""Pins `stripe._api_version._ApiVersion.CURRENT`, as text only."""',
        "# server._lowlevel_server, in a comment",
        "class A:\n    def __init__(self):\n        self._n = 1\n\n    def same(self, other):\n"
        "        return other._n == self._n",
        "def _helper():\n    pass\n\n_helper()",
        "from service.identity import secrets as ours\nours._private_helper()",
        "from anyio import to_thread\nx.__class__",
        "from . import billing\nbilling._sub_of(invoice)",
    ],
)
def test_our_own_private_names_and_text_are_not(source: str) -> None:
    assert scan(source, "sample.py") == [], source
