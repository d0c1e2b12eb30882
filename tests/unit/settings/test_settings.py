from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from service.cli import main
from service.settings import DEV_WEBHOOK_SECRET, ConfigurationError, Settings

SAFE_PRODUCTION: dict[str, Any] = {
    "environment": "production",
    "public_base_url": "https://mcp.example.com",
    "secret_key": "s" * 40,
    "stripe_secret_key": "sk_live_realish",
    "stripe_webhook_secret": "whsec_a,whsec_b",
    "request_state_keys": "a-production-request-state-key-of-32-bytes",
}


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


def test_development_defaults_are_accepted() -> None:
    config = settings()
    assert config.is_development
    assert config.stripe.uses_sandbox
    assert config.http.port == 8000
    assert config.database.url.startswith("sqlite:///")


def test_production_with_real_secrets_starts() -> None:
    config = settings(**SAFE_PRODUCTION)
    assert config.stripe.webhook_secrets == ["whsec_a", "whsec_b"]
    assert config.http.mcp_resource_url == "https://mcp.example.com/mcp"
    assert not config.stripe.uses_sandbox


@pytest.mark.parametrize(
    ("override", "complaint"),
    [
        ({"public_base_url": "http://mcp.example.com"}, "PUBLIC_BASE_URL must use https://"),
        ({"secret_key": "dev-only-secret-key-change-me"}, "SECRET_KEY"),
        ({"secret_key": "short"}, "SECRET_KEY"),
        ({"stripe_webhook_secret": DEV_WEBHOOK_SECRET}, "STRIPE_WEBHOOK_SECRET"),
        ({"request_state_keys": "ZGV2LW9ubHktcmVxdWVzdC1zdGF0ZS1rZXktMzJieXQ="}, "REQUEST_STATE_KEYS"),
        ({"stripe_secret_key": "sk_test_sandbox"}, "STRIPE_SECRET_KEY"),
        ({"stripe_secret_key": "sk_test_realish"}, "STRIPE_SECRET_KEY is not a live key"),
        ({"stripe_secret_key": "rk_test_realish"}, "STRIPE_SECRET_KEY is not a live key"),
        ({"stripe_secret_key": ""}, "STRIPE_SECRET_KEY is not a live key"),
        ({"stripe_webhook_secret": ""}, "STRIPE_WEBHOOK_SECRET must name Stripe signing secrets"),
        ({"stripe_webhook_secret": " , "}, "STRIPE_WEBHOOK_SECRET must name Stripe signing secrets"),
        ({"stripe_webhook_secret": "whsec_a,x"}, "STRIPE_WEBHOOK_SECRET must name Stripe signing secrets"),
        ({"password_hash_memory_kib": 8192}, "PASSWORD_HASH_MEMORY_KIB"),
        ({"password_hash_time_cost": 1}, "PASSWORD_HASH_TIME_COST"),
        ({"stripe_api_base": "http://127.0.0.1:8001"}, "STRIPE_API_BASE is set"),
        ({"stripe_api_base": "https://api.stripe.com"}, "STRIPE_API_BASE is set"),
    ],
)
def test_production_refuses_unsafe_values(override: dict[str, str], complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint):
        settings(**{**SAFE_PRODUCTION, **override})


def test_a_staging_deployment_may_run_production_on_a_test_mode_key() -> None:
    staging = settings(
        **{**SAFE_PRODUCTION, "stripe_secret_key": "sk_test_realish", "stripe_allow_test_mode": "true"}
    )
    assert not staging.stripe.is_live


@pytest.mark.parametrize(
    ("keys", "complaint"),
    [
        ("", "needs at least one key"),
        ("short-key", "key 1 is shorter than 32 bytes"),
        ("a-production-request-state-key-of-32-bytes,short", "key 2 is shorter than 32 bytes"),
    ],
)
def test_request_state_keys_are_long_enough_in_every_environment(keys: str, complaint: str) -> None:
    for environment in ("development", "production"):
        with pytest.raises(ValidationError, match=complaint):
            settings(**{**SAFE_PRODUCTION, "environment": environment, "request_state_keys": keys})


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "9123")
    monkeypatch.setenv("STRIPE_WEBHOOK_SECRET", "whsec_new, whsec_old")
    monkeypatch.setenv("PUBLIC_BASE_URL", "http://localhost:9123/")
    config = settings()
    assert config.http.port == 9123
    assert config.stripe.webhook_secrets == ["whsec_new", "whsec_old"]
    assert config.http.public_base_url == "http://localhost:9123"


def test_cli_refuses_to_start_in_production_with_defaults(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from service.cli import main

    monkeypatch.setenv("ENVIRONMENT", "production")
    monkeypatch.chdir("/")
    assert main(["migrate"]) == 2
    assert "refusing to start with ENVIRONMENT=production" in capsys.readouterr().err


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.0.2.10", "mcp.example.com"])  # noqa: S104
def test_development_refuses_a_non_loopback_host(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.setenv("HOST", host)
    with pytest.raises(ConfigurationError, match="ALLOW_NON_LOOPBACK_IN_DEVELOPMENT"):
        settings()
    monkeypatch.setenv("ALLOW_NON_LOOPBACK_IN_DEVELOPMENT", "true")
    assert settings().http.host == host, "an explicit opt-out (the sandbox overlay) still starts"
    monkeypatch.delenv("ALLOW_NON_LOOPBACK_IN_DEVELOPMENT")
    assert settings(**SAFE_PRODUCTION).http.host == host, "production listens where it is told"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_development_accepts_loopback_hosts(host: str) -> None:
    assert settings(host=host).http.host == host


def test_cli_serve_refuses_a_non_loopback_host_flag_in_development(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from service.cli import main

    monkeypatch.chdir("/")
    monkeypatch.setenv("PLANS_FILE", "/nonexistent/plans.toml")  # were the host let through: stop there
    assert main(["serve", "--host", "0.0.0.0"]) == 2  # noqa: S104
    assert "refusing to listen on HOST=0.0.0.0" in capsys.readouterr().err


def test_an_invalid_setting_is_a_configuration_error_that_hides_the_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REQUEST_STATE_KEYS", "secret-but-short")
    monkeypatch.setenv("ENVIRONMENT", "prod")
    assert main(["migrate"]) == 2
    errors = capsys.readouterr().err
    assert "configuration error: environment: Input should be 'development' or 'production'" in errors
    assert "configuration error: mcp.request_state_keys: Value error, REQUEST_STATE_KEYS key 1" in errors
    assert "secret-but-short" not in errors and "Traceback" not in errors
