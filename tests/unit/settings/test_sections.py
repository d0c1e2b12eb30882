"""Each domain's settings section reads its flat variables, validates itself, and stands alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from service.settings import (
    ConfigurationError,
    GatewaySettings,
    HttpSettings,
    OidcSettings,
    Settings,
    StripeSettings,
    flat_names,
)


def test_flat_variables_land_in_their_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIPE_SECRET_KEY", "sk_test_from_env")
    monkeypatch.setenv("LOG_FORMAT", "json")
    monkeypatch.setenv("UPSTREAM_FREE_TOOLS", "echo, time")
    monkeypatch.setenv("MAX_TOOL_OUTPUT_BYTES", "4096")

    settings = Settings(_env_file=None)

    assert settings.stripe.secret_key.get_secret_value() == "sk_test_from_env"
    assert settings.observability.log_format == "json"
    assert settings.gateway.free_tools == ["echo", "time"]
    assert settings.tools.max_output_bytes == 4096


def test_a_dotenv_file_is_read_by_flat_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OIDC_SCOPES", raising=False)
    env_file = tmp_path / ".env"
    env_file.write_text("OIDC_SCOPES=openid email\nRETENTION_AUDIT_DAYS=12\n")

    settings = Settings(_env_file=env_file)

    assert settings.oidc.scopes == "openid email"
    assert settings.retention.audit_days == 12


def test_keyword_arguments_take_flat_names_or_whole_sections() -> None:
    flat = Settings(_env_file=None, stripe_secret_key="sk_test_a", port=9000)  # type: ignore[call-arg]
    assert flat.stripe.secret_key.get_secret_value() == "sk_test_a"
    assert flat.http.port == 9000

    whole = Settings(_env_file=None, stripe=StripeSettings(secret_key=SecretStr("sk_test_b")))
    assert whole.stripe.secret_key.get_secret_value() == "sk_test_b"
    assert whole.stripe.webhook_secrets == flat.stripe.webhook_secrets

    both = Settings(  # type: ignore[call-arg]
        _env_file=None, stripe=whole.stripe, stripe_api_base="http://127.0.0.1:1"
    )
    assert both.stripe.secret_key.get_secret_value() == "sk_test_b"
    assert both.stripe.api_base == "http://127.0.0.1:1"


def test_a_section_validates_itself_without_settings() -> None:
    with pytest.raises(ValidationError, match="TRUSTED_PROXIES"):
        HttpSettings(trusted_proxies=["not-an-address"])
    with pytest.raises(ValidationError):
        HttpSettings(port=0)
    with pytest.raises(ConfigurationError, match="OIDC_CLIENT_ID"):
        OidcSettings(issuer="https://idp.example.com")
    with pytest.raises(ConfigurationError, match="UPSTREAM_MCP_URL"):
        GatewaySettings(url="http://upstream.example.com/mcp")
    with pytest.raises(ValidationError):
        StripeSettings(unknown_field=1)


def test_a_section_accepts_its_variable_names_too() -> None:
    assert StripeSettings.model_validate({"stripe_webhook_secret": "whsec_a,whsec_b"}).webhook_secrets == [
        "whsec_a",
        "whsec_b",
    ]


def test_every_variable_has_one_section_and_keeps_its_name() -> None:
    names = flat_names()
    assert names["stripe_secret_key"] == ("stripe", "secret_key")
    assert names["log_format"] == ("observability", "log_format")
    assert names["upstream_mcp_url"] == ("gateway", "url")
    assert len(names) == len(set(names.values()))


def test_the_settings_package_imports_no_domain_package() -> None:
    code = (
        "import sys, service.settings, service.configuration_doc\n"
        "print(sorted(m for m in sys.modules if m.startswith('service.')"
        " and not m.startswith(('service.settings', 'service.configuration_doc'))))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_section_passed_whole_outranks_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIPE_SECRET_KEY", "sk_test_from_env")
    monkeypatch.setenv("STRIPE_API_BASE", "http://127.0.0.1:2")

    settings = Settings(_env_file=None, stripe=StripeSettings(secret_key=SecretStr("sk_test_given")))

    assert settings.stripe.secret_key.get_secret_value() == "sk_test_given"
    assert settings.stripe.api_base is None, "the section given whole is used as given"
    assert Settings(_env_file=None, stripe_secret_key="sk_test_kw").stripe.api_base == "http://127.0.0.1:2"  # type: ignore[call-arg]


@pytest.mark.parametrize("everyone", ["0.0.0.0/0", "::/0", "128.0.0.0/1", "10.0.0.0/7", "2000::/3"])
def test_trusted_proxies_refuse_a_range_that_trusts_much_of_the_internet(everyone: str) -> None:
    with pytest.raises(ValidationError, match="wider than"):
        HttpSettings(trusted_proxies=["127.0.0.1", everyone])


def test_trusted_proxies_take_private_ranges_and_published_proxy_ranges() -> None:
    proxies = ["10.0.0.0/8", "172.16.0.0/12", "104.16.0.0/13", "2606:4700::/32", "fc00::/16"]
    assert HttpSettings(trusted_proxies=proxies).trusted_proxies == proxies
