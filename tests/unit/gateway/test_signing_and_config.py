"""The signed user header's format and checks, and which upstream URLs the settings accept."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from service.gateway.signing import InvalidUserHeader, sign_user_header, verify_user_header
from service.settings import ConfigurationError, Settings

SECRET = "vendor-shared-secret"
NOW = 1_800_000_000


def test_header_is_user_timestamp_and_hmac_of_both() -> None:
    value = sign_user_header(SECRET, "usr_abc", now=NOW)
    expected = hmac.new(SECRET.encode(), f"usr_abc.{NOW}".encode(), hashlib.sha256).hexdigest()
    assert value == f"usr_abc.{NOW}.{expected}", "the documented format, recomputable without our code"
    assert verify_user_header(SECRET, value, now=NOW + 10) == "usr_abc"


def test_user_ids_with_dots_verify() -> None:
    assert verify_user_header(SECRET, sign_user_header(SECRET, "a.b.c", now=NOW), now=NOW) == "a.b.c"


@pytest.mark.parametrize(
    "value",
    [
        sign_user_header("another secret", "usr_abc", now=NOW),
        sign_user_header(SECRET, "usr_abc", now=NOW).replace("usr_abc", "usr_abd"),
        sign_user_header(SECRET, "usr_abc", now=NOW).replace(str(NOW), str(NOW + 1)),
        "usr_abc",
        f"usr_abc.{NOW}.",
        f"usr_abc.soon.{'0' * 64}",
    ],
)
def test_forged_or_malformed_headers_are_refused(value: str) -> None:
    with pytest.raises(InvalidUserHeader):
        verify_user_header(SECRET, value, now=NOW)


def test_stale_headers_are_refused() -> None:
    value = sign_user_header(SECRET, "usr_abc", now=NOW)
    assert verify_user_header(SECRET, value, now=NOW + 299) == "usr_abc"
    with pytest.raises(InvalidUserHeader, match="old"):
        verify_user_header(SECRET, value, now=NOW + 301)


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9000/mcp", "http://localhost:9000/mcp", "http://[::1]/mcp", "https://x.example/mcp"],
)
def test_development_accepts_https_and_loopback_http(url: str) -> None:
    assert settings(upstream_mcp_url=url).upstream_mcp_url == url


@pytest.mark.parametrize("url", ["http://tools.example.com/mcp", "ftp://127.0.0.1/mcp", "/mcp"])
def test_development_refuses_plain_http_elsewhere(url: str) -> None:
    with pytest.raises(ConfigurationError, match="UPSTREAM_MCP_URL"):
        settings(upstream_mcp_url=url)


def test_production_refuses_even_loopback_http() -> None:
    with pytest.raises(ConfigurationError, match="UPSTREAM_MCP_URL"):
        settings(environment="production", upstream_mcp_url="http://127.0.0.1:9000/mcp")
