"""The Stripe sandbox (stripe_sandbox/) is layered one way, by an AST scan of its modules:

objects -> store -> domain -> api -> app: a module imports only modules of its own layer or lower
ones, and no import cycle exists; it imports nothing from `service` (the sandbox is a product of its
own, which the service uses); every import is at module level (none inside a function, where it
would hide a cycle); and no module uses another module's `_private` names.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "stripe_sandbox"

LAYERS: dict[str, tuple[str, ...]] = {
    "objects": (
        "cards",
        "config",
        "errors",
        "forms",
        "ids",
        "money",
        "objects",
        "objects_billing",
        "objects_meters",
        "objects_payments",
        "params_allowed",
        "params_implemented",
    ),
    "store": ("state", "webhooks", "sandbox", "idempotency"),
    "domain": ("payments", "plan_changes", "meters", "billing", "catalog", "checkout", "clocks"),
    "api": (
        "api",
        "api_billing",
        "api_catalog",
        "api_checkout",
        "api_clocks",
        "api_events",
        "api_meter_stream",
        "api_meters",
        "api_subscriptions",
        "test_helpers",
        "pages",
        "challenge_page",
        "checkout_page",
        "hosted_pages",
        "portal_page",
    ),
    "app": ("app", "__init__"),
}
RANK = {module: rank for rank, modules in enumerate(LAYERS.values()) for module in modules}
NAMES = list(LAYERS)


def own_imports(tree: ast.Module, module: str) -> list[tuple[int, str, list[str]]]:
    """(line, imported sibling module, names taken from it) for each import of the package's own."""
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
            if node.level == 1 and node.module is None:  # from . import billing, checkout
                found += [(node.lineno, name, []) for name in names]
            elif node.level == 1 and node.module:
                found.append((node.lineno, node.module.split(".")[0], names))
            elif node.level == 0 and node.module and node.module.split(".")[0] == "stripe_sandbox":
                parts = node.module.split(".")
                found.append((node.lineno, parts[1] if len(parts) > 1 else "__init__", names))
    return found


def findings(sources: dict[str, str]) -> list[str]:
    """What breaks the rules in `sources` (module name -> source text)."""
    problems: list[str] = []
    graph: dict[str, set[str]] = {}
    for module, source in sorted(sources.items()):
        own_problems, imported = module_findings(module, source)
        problems += own_problems
        if imported:
            graph[module] = set(imported)
    problems += [f"import cycle: {' -> '.join(cycle)}" for cycle in _cycles(graph)]
    return problems


@functools.cache
def module_findings(module: str, source: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """What breaks the rules in one module, and the package's modules it imports. Each case
    changes one module, so the others' answers are reused."""
    tree = ast.parse(source)
    where = f"stripe_sandbox/{module}.py"
    if module not in RANK:
        return (f"{where}: in no layer (add it to LAYERS)",), frozenset()
    problems: list[str] = []
    module_level = {id(node) for node in tree.body}
    in_module_level_try = {
        id(child)
        for node in tree.body
        if isinstance(node, ast.Try)
        for stmt in node.body
        for child in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            # An import in a module-level `try` (an optional dependency) is still a module-level one.
            if id(node) not in module_level and id(node) not in in_module_level_try:
                problems.append(f"{where}:{node.lineno}: import inside a function or class")
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                modules = [node.module or ""] if node.level == 0 else []
            if any(name.split(".")[0] == "service" for name in modules):
                problems.append(f"{where}:{node.lineno}: imports the service")
    own_modules = {name for _, name, names in own_imports(tree, module) if not names}
    imported_modules: set[str] = set()
    for line, imported, names in own_imports(tree, module):
        imported_modules.add(imported)
        if imported in RANK and RANK[imported] > RANK[module]:
            problems.append(
                f"{where}:{line}: the {NAMES[RANK[module]]} layer imports {imported} "
                f"of the higher {NAMES[RANK[imported]]} layer"
            )
        problems += [f"{where}:{line}: imports {imported}.{name}" for name in names if _private(name)]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in own_modules
        ):
            problems.append(f"{where}:{node.lineno}: uses {node.value.id}.{node.attr}")
    return tuple(problems), frozenset(imported_modules)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == "open":
                cycles.append([*path[path.index(imported) :], imported])
            elif imported not in state:
                visit(imported, [*path, imported])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def package_sources() -> dict[str, str]:
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(PACKAGE.glob("*.py"))}


def test_the_sandbox_is_layered_one_way() -> None:
    problems = findings(package_sources())
    assert not problems, "\n".join(problems)


def test_every_module_is_in_a_layer() -> None:
    assert set(package_sources()) == set(RANK)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("objects", "from .sandbox import Sandbox"),  # objects -> store
        ("sandbox", "from . import billing"),  # store -> domain
        ("checkout", "from .api_catalog import search"),  # domain -> api
        ("api", "from stripe_sandbox.app import create_sandbox_app"),  # api -> app
        ("pages", "from service.money import format_amount"),
        ("pages", "import service.money"),
        ("billing", "def advance():\n    from .checkout import expire_session"),
        ("billing", "class Clock:\n    import json"),
        ("api_billing", "from . import billing\nbilling._sub_of({})"),
        ("api_checkout", "from .checkout import _url_param"),
        ("billing", "from . import checkout"),  # with checkout importing billing: a cycle
    ],
)
def test_breaking_a_rule_is_caught(module: str, source: str) -> None:
    sources = package_sources()
    sources[module] = source
    assert set(findings(sources)) - set(findings(package_sources())), source
