"""SECRETS_DIR: secret settings read from files, one per setting, as a mounted Kubernetes Secret has them."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.settings import ConfigurationError, Settings

SECRET_VARIABLES = ("SECRET_KEY", "REQUEST_STATE_KEYS", "STRIPE_WEBHOOK_SECRET", "SECRETS_DIR")


@pytest.fixture
def secrets_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in SECRET_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SECRETS_DIR", str(tmp_path))
    return tmp_path


def settings() -> Settings:
    return Settings(_env_file=None)


def test_a_file_in_the_directory_sets_a_secret_setting(secrets_dir: Path) -> None:
    (secrets_dir / "SECRET_KEY").write_text("k" * 40 + "\n")  # kubectl keeps a file's newline
    (secrets_dir / "REQUEST_STATE_KEYS").write_text(
        "new-key-of-at-least-32-bytes-long,old-key-of-at-least-32-bytes-long"
    )

    config = settings()

    assert config.http.secret_key.get_secret_value() == "k" * 40
    assert config.mcp.request_state_keys == [
        "new-key-of-at-least-32-bytes-long",
        "old-key-of-at-least-32-bytes-long",
    ]


def test_the_environment_wins_over_a_file(secrets_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (secrets_dir / "STRIPE_WEBHOOK_SECRET").write_text("whsec_from_file")
    monkeypatch.setenv("STRIPE_WEBHOOK_SECRET", "whsec_from_env")

    assert settings().stripe.webhook_secrets == ["whsec_from_env"]


def test_a_missing_directory_refuses_to_start(secrets_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRETS_DIR", str(secrets_dir / "absent"))

    with pytest.raises(ConfigurationError, match="SECRETS_DIR"):
        settings()


def test_a_mounted_kubernetes_secret_is_read_through_its_symlinks(secrets_dir: Path) -> None:
    """The kubelet writes a Secret volume as `..data/<key>` with a symlink `<key>` beside it."""
    (secrets_dir / "..2026_12_02_00_00_00.1").mkdir()
    (secrets_dir / "..2026_12_02_00_00_00.1" / "SECRET_KEY").write_text("m" * 40)
    (secrets_dir / "..data").symlink_to("..2026_12_02_00_00_00.1")
    (secrets_dir / "SECRET_KEY").symlink_to("..data/SECRET_KEY")

    assert settings().http.secret_key.get_secret_value() == "m" * 40
