"""What the project declares is what it uses, and the lock files pin all of it.

The image and the wheel's smoke test install requirements.lock and nothing else, so a package the
code imports but pyproject.toml does not declare (or that the lock leaves out) breaks only there.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import files, packages_distributions, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import service
from service.cli import main

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SANDBOX = tomllib.loads((ROOT / "sandbox" / "pyproject.toml").read_text())["project"]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)


def pins(lock: str) -> dict[str, str]:
    return {canonicalize_name(name): pinned for name, pinned in PIN.findall((ROOT / lock).read_text())}


def requirements(group: str | None = None) -> list[Requirement]:
    listed = PROJECT["dependencies"] if group is None else PROJECT["optional-dependencies"][group]
    return [Requirement(line) for line in listed]


def _owners(module: str, providers: dict[str, list[str]]) -> list[str]:
    """The distributions providing `module`. Several share a namespace package (`opentelemetry`):
    then the ones holding the module's own files."""
    candidates = providers.get(module.partition(".")[0], [module.partition(".")[0]])
    if len(candidates) == 1:
        return candidates
    path = module.replace(".", "/")
    return [
        dist
        for dist in candidates
        if any(str(file).startswith((f"{path}/", f"{path}.py")) for file in files(dist) or [])
    ]


def imported_distributions(package: str = "service") -> set[str]:
    """Distributions whose modules `package` imports (not the standard library, not itself)."""
    imports: set[tuple[str, ...]] = set()  # each: the modules it may name, most specific first
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imports.update((alias.name,) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imports.update((f"{node.module}.{alias.name}", node.module) for alias in node.names)
    # An editable install names no top-level package (it only extends sys.path): say which it is.
    providers = {**packages_distributions(), "stripe_sandbox": [SANDBOX["name"]]}
    found: set[str] = set()
    for names in imports:
        if names[-1].partition(".")[0] in set(sys.stdlib_module_names) | {package}:
            continue
        owners = next((owners for name in names if (owners := _owners(name, providers))), [names[-1]])
        found.update(canonicalize_name(dist) for dist in owners)
    return found


def test_every_imported_package_is_a_declared_runtime_dependency() -> None:
    """Or, for the tracing SDK imported only when tracing is on, a dependency of the `otel` extra;
    for the Stripe sandbox, of the `sandbox` extra."""
    declared = {canonicalize_name(requirement.name) for requirement in requirements()}
    optional = {
        canonicalize_name(requirement.name)
        for group in ("otel", "sandbox")
        for requirement in requirements(group)
    }
    assert imported_distributions() - declared - optional == set()


def test_the_sandbox_extra_is_the_sandbox_distribution_at_its_version() -> None:
    (requirement,) = requirements("sandbox")
    assert canonicalize_name(requirement.name) == canonicalize_name(SANDBOX["name"])
    assert requirement.specifier.contains(SANDBOX["version"])
    assert "paid-mcp-stripe-sandbox" in imported_distributions()


def test_the_sandbox_declares_what_it_imports_and_the_service_pins_it_all() -> None:
    """requirement.lock, compiled without the `sandbox` extra, still holds its dependencies."""
    sandbox = {canonicalize_name(Requirement(line).name) for line in SANDBOX["dependencies"]}
    assert imported_distributions("stripe_sandbox") == sandbox
    assert sandbox <= {canonicalize_name(requirement.name) for requirement in requirements()}


@pytest.mark.parametrize(
    ("lock", "groups"), [("requirements.lock", [None]), ("requirements-dev.lock", [None, "dev", "otel"])]
)
def test_the_lock_pins_every_declared_dependency_within_its_range(
    lock: str, groups: list[str | None]
) -> None:
    pinned = pins(lock)
    for group in groups:
        for requirement in requirements(group):
            name = canonicalize_name(requirement.name)
            assert name in pinned, f"{lock} does not pin {requirement.name}: run `make lock`"
            assert requirement.specifier.contains(pinned[name]), (
                f"{lock}: {name}=={pinned[name]} vs {requirement}"
            )


def test_the_dev_lock_pins_the_runtime_set_at_the_same_versions() -> None:
    runtime, dev = pins("requirements.lock"), pins("requirements-dev.lock")
    assert {name: dev.get(name) for name in runtime} == runtime


def test_greenlet_is_locked_for_sqlalchemys_async_engine() -> None:
    assert "greenlet" in pins("requirements.lock")


def test_the_package_and_the_command_report_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert service.__version__ == version("paid-mcp-service")
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"paid-mcp-service {service.__version__}"


def test_the_uv_that_installs_the_dev_lock_is_the_one_it_pins() -> None:
    """`make install` installs uv from requirements-uv.lock, then the dev lock with that uv."""
    assert pins("requirements-uv.lock") == {"uv": pins("requirements-dev.lock")["uv"]}
    entry = re.compile(r"^uv==.*\n(?:[ \t]+.*\n?)*", re.MULTILINE)
    uv_lock, dev_lock = (
        entry.search((ROOT / lock).read_text()) for lock in ("requirements-uv.lock", "requirements-dev.lock")
    )
    assert uv_lock is not None and dev_lock is not None
    hashes = [set(re.findall(r"sha256:[0-9a-f]{64}", found.group())) for found in (uv_lock, dev_lock)]
    assert hashes[0] == hashes[1] and len(hashes[0]) > 1
