from __future__ import annotations

from pathlib import Path

import pytest

from service.billing.plans import DEFAULT_PLANS_FILE, Plan, PlanCatalog, PlanCatalogError
from service.money import format_amount


@pytest.mark.parametrize(
    ("amount", "currency", "text"),
    [
        (900, "usd", "9.00 USD"),
        (5, "eur", "0.05 EUR"),
        (500, "jpy", "500 JPY"),
        (-1250, "usd", "-12.50 USD"),
        (1250, "kwd", "1.250 KWD"),
        (5, "bhd", "0.005 BHD"),
        (12345, "clf", "1.2345 CLF"),
        (700, "krw", "700 KRW"),
    ],
)
def test_format_amount(amount: int, currency: str, text: str) -> None:
    assert format_amount(amount, currency) == text


def test_the_default_catalog_loads() -> None:
    catalog = PlanCatalog.load(DEFAULT_PLANS_FILE)
    pro = catalog.get("pro")
    assert pro is not None and pro.price_label == "9.00 USD / month"
    assert [plan.id for plan in catalog.plans_unlocking("ascii_chart")] == ["pro", "team", "payg"]
    assert [plan.id for plan in catalog.plans_unlocking("password_audit")] == ["team"]
    assert catalog.by_lookup_key("paid_mcp_team_monthly") == catalog.get("team")
    assert pro.included_calls == 1000 and pro.overage == "block"
    [pack] = catalog.credit_packs()
    assert (pack.credits, pack.amount, pack.currency) == (100, 500, "usd")


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("[[plans]]\nid = 'x'\n", "invalid plans file"),
        ("not toml = = =", "invalid plans file"),
        (
            "[[plans]]\nid='a'\nname='A'\nlookup_key='k'\namount=-1\ncurrency='usd'\ninterval='month'\n",
            "invalid plans file",
        ),
        (
            "[[plans]]\nid='a'\nname='A'\nlookup_key='k'\namount=1\ncurrency='usd'\ninterval='month'\n"
            "[[plans]]\nid='b'\nname='B'\nlookup_key='k'\namount=1\ncurrency='usd'\ninterval='month'\n",
            "lookup keys must be unique",
        ),
        (
            "[[plans]]\nid='a'\nname='A'\nlookup_key='k'\namount=900\ncurrency='usx'\ninterval='month'\n",
            "'usx' is not an ISO 4217 currency code",
        ),
        (
            "[[plans]]\nid='a'\nname='A'\nlookup_key='k'\namount=1255\ncurrency='kwd'\ninterval='month'\n",
            "KWD amounts .thousandths. to end in 0",
        ),
        (
            "[[plans]]\nid='a'\nname='A'\nlookup_key='k'\namount=900\ncurrency='isk'\ninterval='month'\n",
            "Stripe does not count ISK in ISO 4217 minor units",
        ),
    ],
)
def test_bad_plan_files_are_refused_clearly(tmp_path: Path, content: str, complaint: str) -> None:
    path = tmp_path / "plans.toml"
    path.write_text(content)
    with pytest.raises(PlanCatalogError, match=complaint):
        PlanCatalog.load(path)


def test_a_missing_plans_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PlanCatalogError, match="cannot read plans file"):
        PlanCatalog.load(tmp_path / "absent.toml")


def test_a_plans_file_not_in_utf8_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "plans.toml"
    path.write_bytes("# Caf\u00e9 plans\n".encode("latin-1"))
    with pytest.raises(PlanCatalogError, match=r"is not UTF-8 \(byte 5\)"):
        PlanCatalog.load(path)


def test_amounts_are_integers() -> None:
    with pytest.raises(ValueError, match="integer"):
        Plan(id="a", name="A", lookup_key="k", amount=9.99, currency="usd", interval="month")
