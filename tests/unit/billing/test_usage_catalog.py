"""The catalog's usage pricing: included calls, metered prices, credit packs, strictly validated."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.billing.plans import PlanCatalog, PlanCatalogError

PAYG = """
[[plans]]
id = "payg"
name = "Pay as you go"
lookup_key = "payg_monthly"
amount = 0
currency = "usd"
interval = "month"
tools = ["sql_explain"]
included_calls = 0
overage = "meter"
"""
METERED = """
[[metered_prices]]
tool = "sql_explain"
lookup_key = "sql_explain_metered"
event_name = "sql_explain_calls"
unit_amount = 2
currency = "usd"
"""
PACK = """
[[credit_packs]]
id = "calls_100"
name = "100 calls"
lookup_key = "credits_100"
credits = 100
amount = 500
currency = "usd"
"""


def load(tmp_path: Path, text: str) -> PlanCatalog:
    path = tmp_path / "plans.toml"
    path.write_text(text)
    return PlanCatalog.load(path)


def test_one_of_each_loads(tmp_path: Path) -> None:
    catalog = load(tmp_path, PAYG + METERED + PACK)
    payg = catalog.get("payg")
    assert payg is not None and payg.meters_overage and payg.included_calls == 0
    assert payg.price_label == "pay per call, billed each month"
    [metered] = catalog.metered_prices_of(payg)
    assert metered.unit_amount == 2 and metered.price_label == "0.02 USD per sql_explain call"
    assert catalog.metered_price("sql_explain") == metered
    pack = catalog.credit_pack("calls_100")
    assert pack is not None and pack.price_label == "5.00 USD once"
    assert catalog.pack_by_lookup_key("credits_100") == pack
    catalog.check_plan_tools(paid={"sql_explain"}, free=set())


def test_per_period_plans_are_offered_before_pay_per_call(tmp_path: Path) -> None:
    pro = (
        PAYG.replace("payg", "pro")
        .replace("amount = 0", "amount = 900")
        .replace("included_calls = 0", "included_calls = 1000")
    )
    catalog = load(tmp_path, PAYG + pro + METERED)
    assert [plan.id for plan in catalog.plans_unlocking("sql_explain")] == ["pro", "payg"]


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (PAYG, "tool 'sql_explain' has no metered price"),
        (PAYG + METERED.replace('"usd"', '"eur"'), "currency and interval must match"),
        (PAYG.replace("included_calls = 0\n", ""), "`overage` needs `included_calls`"),
        (PAYG.replace('overage = "meter"\n', ""), "`included_calls` needs `overage`"),
        (PAYG.replace('"meter"', '"block"') + METERED, "sells nothing"),
        (PAYG.replace('"meter"', '"free"') + METERED, "overage"),
        (PAYG.replace("included_calls = 0", "included_calls = -1") + METERED, "included_calls"),
        (PAYG + METERED.replace("unit_amount = 2", "unit_amount = 0"), "unit_amount"),
        (PAYG + METERED.replace("unit_amount = 2", "unit_amount = 100000000"), "unit_amount"),
        (PAYG + METERED.replace('"usd"', '"kwd"').replace("unit_amount = 2", "unit_amount = 5"), "end in 0"),
        (PAYG + METERED.replace("sql_explain_calls", "Bad Name"), "event_name"),
        (PAYG + METERED + METERED.replace("sql_explain_metered", "other"), "at most one metered price"),
        (PACK.replace("credits = 100", "credits = 0"), "credits"),
        (PACK.replace("credits = 100", "credits = 1000001"), "credits"),
        (PACK.replace("amount = 500", "amount = 0"), "amount"),
        (PACK.replace('"usd"', '"usx"'), "ISO 4217"),
        (PACK + PACK.replace("credits_100", "credits_other"), "credit pack ids must be unique"),
        (PACK + PAYG.replace("payg_monthly", "credits_100") + METERED, "lookup keys must be unique"),
        (PACK.replace("credits = 100", "credits = 100\nbonus = 5"), "bonus"),
    ],
)
def test_bad_usage_catalogs_are_refused_clearly(tmp_path: Path, text: str, complaint: str) -> None:
    with pytest.raises(PlanCatalogError, match=complaint):
        load(tmp_path, text)


def test_a_metered_price_for_a_free_tool_is_a_startup_error(tmp_path: Path) -> None:
    catalog = load(tmp_path, METERED)
    with pytest.raises(PlanCatalogError, match="not a served paid tool"):
        catalog.check_plan_tools(paid=set(), free={"sql_explain"})
