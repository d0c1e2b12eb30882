"""docs/configuration.md is the renderer's output, and every setting has a description."""

from __future__ import annotations

from pathlib import Path

from service.configuration_doc import grouped_fields, render
from service.settings import Settings, flat_names

CONFIGURATION_DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_configuration_doc_is_current() -> None:
    assert CONFIGURATION_DOC.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is out of date with service/settings/: run `make docs`"
    )


def test_every_setting_has_a_description() -> None:
    undescribed = [
        name
        for _, fields in grouped_fields()
        for name, field in fields
        if not (field.description or "").strip()
    ]
    assert undescribed == [], f"give these settings a docstring in service/settings/: {undescribed}"


def test_every_variable_is_in_exactly_one_section() -> None:
    documented = [name for _, fields in grouped_fields() for name, _ in fields]
    assert sorted(documented) == sorted(["environment", *flat_names()])
    assert len(set(documented)) == len(documented)
    assert "environment" in Settings.model_fields
