"""The signed user header's format and checks, and which upstream URLs the settings accept."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest
from pydantic import ValidationError

from service.gateway.signing import (
    DEFAULT_MAX_AGE_SECONDS,
    InvalidUserHeader,
    sign_user_header,
    verify_user_header,
)
from service.settings import ConfigurationError, Settings

SECRET = "vendor-shared-secret"
NOW = 1_800_000_000
TOOL = "premium_report"
ARGS = {"text": "quarterly numbers", "limit": 3}


def signed(user_id: str = "usr_abc", *, secret: str = SECRET, tool: str = TOOL, args: object = ARGS) -> str:
    return sign_user_header(secret, user_id, tool_name=tool, arguments=args, now=NOW)  # type: ignore[arg-type]


def verified(value: str, *, tool: str = TOOL, args: object = ARGS, now: float = NOW) -> str:
    return verify_user_header(SECRET, value, tool_name=tool, arguments=args, now=now)  # type: ignore[arg-type]


def test_header_is_user_timestamp_and_hmac_over_the_call() -> None:
    value = signed()
    canonical = json.dumps(ARGS, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    message = f"usr_abc.{NOW}.{TOOL}.{digest}"
    expected = hmac.new(SECRET.encode(), message.encode(), hashlib.sha256).hexdigest()
    assert value == f"usr_abc.{NOW}.{expected}", "the documented format, recomputable without our code"
    assert verified(value, now=NOW + 10) == "usr_abc"


def test_argument_order_does_not_matter_but_their_values_do() -> None:
    assert verified(signed(), args={"limit": 3, "text": "quarterly numbers"}) == "usr_abc"
    assert verified(signed(tool="echo", args=None), tool="echo", args={}) == "usr_abc"


def test_user_ids_with_dots_verify() -> None:
    assert verified(signed("a.b.c")) == "a.b.c"


@pytest.mark.parametrize(
    ("value", "tool", "args"),
    [
        (signed(secret="another secret"), TOOL, ARGS),
        (signed().replace("usr_abc", "usr_abd"), TOOL, ARGS),
        (signed().replace(str(NOW), str(NOW + 1)), TOOL, ARGS),
        (signed(), "echo", ARGS),  # the same header on another tool
        (signed(), TOOL, {**ARGS, "limit": 4}),  # the same tool with other arguments
        (signed(), TOOL, {"text": "quarterly numbers"}),
        ("usr_abc", TOOL, ARGS),
        (f"usr_abc.{NOW}.", TOOL, ARGS),
        (f"usr_abc.soon.{'0' * 64}", TOOL, ARGS),
        (f"usr_abc.\u00b2.{'0' * 64}", TOOL, ARGS),  # a digit to `isdigit()`, not to `int()`
        (f"usr_abc.{'9' * 5000}.{'0' * 64}", TOOL, ARGS),  # beyond the digits `int()` converts
    ],
    ids=[
        "secret",
        "user",
        "time",
        "tool",
        "arguments",
        "fewer-arguments",
        "bare",
        "empty-mac",
        "text-time",
        "superscript-time",
        "huge-time",
    ],
)
def test_forged_replayed_elsewhere_or_malformed_headers_are_refused(
    value: str, tool: str, args: dict[str, object]
) -> None:
    with pytest.raises(InvalidUserHeader):
        verified(value, tool=tool, args=args)


def test_headers_expire_quickly() -> None:
    value = signed()
    assert DEFAULT_MAX_AGE_SECONDS <= 60
    assert verified(value, now=NOW + DEFAULT_MAX_AGE_SECONDS) == "usr_abc"
    with pytest.raises(InvalidUserHeader, match="old"):
        verified(value, now=NOW + DEFAULT_MAX_AGE_SECONDS + 1)


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9000/mcp", "http://localhost:9000/mcp", "http://[::1]/mcp", "https://x.example/mcp"],
)
def test_development_accepts_https_and_loopback_http(url: str) -> None:
    assert settings(upstream_mcp_url=url).gateway.url == url


@pytest.mark.parametrize("url", ["http://tools.example.com/mcp", "ftp://127.0.0.1/mcp", "/mcp"])
def test_development_refuses_plain_http_elsewhere(url: str) -> None:
    with pytest.raises(ConfigurationError, match="UPSTREAM_MCP_URL"):
        settings(upstream_mcp_url=url)


def test_production_refuses_even_loopback_http() -> None:
    with pytest.raises(ConfigurationError, match="UPSTREAM_MCP_URL"):
        settings(environment="production", upstream_mcp_url="http://127.0.0.1:9000/mcp")


GATEWAY = {"upstream_mcp_url": "https://tools.example.com/mcp"}
PRODUCTION = {
    "environment": "production",
    "public_base_url": "https://mcp.example.com",
    "secret_key": "s" * 40,
    "stripe_secret_key": "sk_live_realish",
    "stripe_webhook_secret": "whsec_a",
    "request_state_keys": "a-production-request-state-key-of-32-bytes",
}


def test_production_gateway_requires_the_signed_user_header() -> None:
    with pytest.raises(ConfigurationError, match="UPSTREAM_USER_HEADER_SECRET is required"):
        settings(**PRODUCTION, **GATEWAY)
    signing = settings(**PRODUCTION, **GATEWAY, upstream_user_header_secret="s" * 32)
    assert signing.gateway.user_header_secret is not None


def test_upstream_answers_are_bounded_and_fit_a_whole_result() -> None:
    assert settings().gateway.max_response_bytes == 4 * 1024 * 1024
    with pytest.raises(ValidationError):
        settings(upstream_max_response_bytes=1024)
    with pytest.raises(ValidationError):
        settings(upstream_max_response_bytes=10**12)
    below_the_cap = {"upstream_max_response_bytes": 64 * 1024, "max_tool_output_bytes": 128 * 1024}
    with pytest.raises(ConfigurationError, match=r"UPSTREAM_MAX_RESPONSE_BYTES \(65536\) is below MAX_TOOL"):
        settings(**GATEWAY, **below_the_cap)
    assert settings(**below_the_cap), "no gateway, no check"
