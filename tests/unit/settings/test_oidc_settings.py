"""OIDC_* settings: unset keeps the built-in server; a half-configured external issuer refuses to start."""

from __future__ import annotations

from typing import Any

import pytest

from service.identity.oidc.identities import username_candidates
from service.settings import ConfigurationError, Settings

CLIENT = {"oidc_client_id": "payment-page", "oidc_client_secret": "a-client-secret"}
SAFE_PRODUCTION: dict[str, Any] = {
    "environment": "production",
    "public_base_url": "https://mcp.example.com",
    "secret_key": "s" * 40,
    "stripe_secret_key": "sk_live_realish",
    "stripe_webhook_secret": "whsec_a",
    "request_state_keys": "a-production-request-state-key-of-32-bytes",
}


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


def test_unset_issuer_is_the_built_in_server() -> None:
    config = settings()
    assert config.oidc.issuer is None
    assert config.oidc_expected_audience == "http://127.0.0.1:8000/mcp"


def test_audience_defaults_to_the_resource_and_can_be_named() -> None:
    assert settings(oidc_issuer="http://127.0.0.1:9000", **CLIENT).oidc_expected_audience.endswith("/mcp")
    named = settings(oidc_issuer="http://127.0.0.1:9000", oidc_audience="https://api.example.com", **CLIENT)
    assert named.oidc_expected_audience == "https://api.example.com"


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"oidc_issuer": "http://127.0.0.1:9000"}, "OIDC_CLIENT_ID"),
        ({"oidc_issuer": "http://127.0.0.1:9000", "oidc_client_id": "x"}, "OIDC_CLIENT_SECRET"),
        ({"oidc_issuer": "http://idp.example.com", **CLIENT}, "https"),
        ({"oidc_issuer": "idp.example.com", **CLIENT}, "absolute https URL"),
        ({"oidc_issuer": "https://idp.example.com", "oidc_scopes": "email", **CLIENT}, "openid"),
        ({"oidc_issuer": "http://127.0.0.1:9000", **SAFE_PRODUCTION, **CLIENT}, "https"),
    ],
)
def test_incomplete_or_unsafe_oidc_settings_refuse_to_start(values: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        settings(**values)


def test_production_accepts_an_https_issuer() -> None:
    config = settings(oidc_issuer="https://idp.example.com", **SAFE_PRODUCTION, **CLIENT)
    assert config.oidc.issuer == "https://idp.example.com"


def test_usernames_come_from_the_claims_and_stay_valid() -> None:
    names = username_candidates(
        "https://idp", "auth0|123", {"preferred_username": "Ada L", "email": "a@x.org"}
    )
    assert names[:3] == ["Ada-L", "a@x.org", "auth0-123"]
    assert names[3].startswith("Ada-L-") and names[3] != names[4]
    assert username_candidates("https://idp", "|||", {})[0] == "user"
