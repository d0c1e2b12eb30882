from __future__ import annotations

import pytest

from service.billing.plans import DEFAULT_PLANS_FILE, PlanCatalog
from service.tool_packages import ToolPackageError, load_tools

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


def test_the_same_tool_name_twice_is_refused() -> None:
    with pytest.raises(ToolPackageError, match="'text_stats' comes from both"):
        load_tools(["service.example_tools:tools", "tests.fixtures.vendor_tools:clashing"], CATALOG)
