from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest

from service.billing.plans import DEFAULT_PLANS_FILE, PlanCatalog
from service.settings import Settings
from service.tool_packages import ENTRY_POINT_GROUP, ToolPackageError, load_tools

CATALOG = PlanCatalog.load(DEFAULT_PLANS_FILE)


def test_configured_packages_are_merged() -> None:
    tools = load_tools(["service.example_tools:tools", "tests.fixtures.vendor_tools:tools"], CATALOG)
    names = {spec.name for spec in tools.tools}
    assert {"text_stats", "ascii_chart", "vendor_hello", "vendor_reverse"} <= names
    assert tools.paid_tools["vendor_reverse"].plans == ("team",)
    assert "vendor_hello" not in tools.paid_tools


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("tests.fixtures.vendor_tools", "must look like 'package.module:attribute'"),
        ("tests.fixtures.no_such_package:tools", "cannot import"),
        ("tests.fixtures.vendor_tools:not_a_tool_set", "is not a service.tools.ToolSet"),
        ("tests.fixtures.vendor_tools:missing", "is not a service.tools.ToolSet"),
        ("tests.fixtures.vendor_tools:unknown_plan", "names unknown plans ['platinum']"),
    ],
)
def test_bad_packages_are_refused_clearly(spec: str, complaint: str) -> None:
    with pytest.raises(ToolPackageError, match=complaint.replace("[", r"\[").replace("]", r"\]")):
        load_tools([spec], CATALOG)


@pytest.mark.parametrize(
    ("source", "complaint"),
    [("def broken(:\n", "SyntaxError"), ("raise RuntimeError('no')\n", "RuntimeError: no")],
)
def test_a_package_whose_import_fails_is_refused_clearly(
    source: str, complaint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "failing_tools.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ToolPackageError, match=f"'failing_tools:tools': importing 'failing_tools' failed: {complaint}"
    ):
        load_tools(["failing_tools:tools"], CATALOG)


def test_the_same_tool_name_twice_is_refused() -> None:
    with pytest.raises(ToolPackageError, match="'text_stats' comes from both"):
        load_tools(["service.example_tools:tools", "tests.fixtures.vendor_tools:clashing"], CATALOG)


@pytest.fixture
def advertised_vendor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed distribution advertising a tool set through the `paid_mcp.tools` entry point."""
    dist_info = tmp_path / "vendor_tools_dist-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: vendor-tools-dist\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nvendor = tests.fixtures.vendor_tools:tools\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.usefixtures("advertised_vendor")
def test_entry_point_tool_packages_load_only_when_enabled() -> None:
    assert any(point.name == "vendor" for point in entry_points(group=ENTRY_POINT_GROUP))
    by_default = load_tools(["service.example_tools:tools"], CATALOG)
    assert "vendor_hello" not in {spec.name for spec in by_default.tools}, "installed is not enabled"
    enabled = load_tools(["service.example_tools:tools"], CATALOG, entry_points_enabled=True)
    assert {"vendor_hello", "vendor_reverse"} <= {spec.name for spec in enabled.tools}


def test_entry_points_are_off_unless_the_setting_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(_env_file=None).tools.entry_points is False
    monkeypatch.setenv("TOOL_ENTRY_POINTS", "true")
    assert Settings(_env_file=None).tools.entry_points is True
