"""docs/configuration.md is the renderer's output, and every setting has a description."""

from __future__ import annotations

from pathlib import Path

from service.configuration_doc import grouped_fields, render
from service.settings import Settings

CONFIGURATION_DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_configuration_doc_is_current() -> None:
    assert CONFIGURATION_DOC.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is out of date with service/settings.py: run `make docs`"
    )


def test_every_setting_has_a_description() -> None:
    undescribed = [
        name for name, field in Settings.model_fields.items() if not (field.description or "").strip()
    ]
    assert undescribed == [], f"give these settings a docstring in service/settings.py: {undescribed}"


def test_every_setting_is_in_a_group() -> None:
    grouped = [name for _, names in grouped_fields() for name in names]
    assert grouped == list(Settings.model_fields)
