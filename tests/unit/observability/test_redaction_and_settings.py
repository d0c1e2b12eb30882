"""The log scrubber's patterns, the JSON line shape, and where /metrics is served by default."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest

from service.observability.logs import build_handler
from service.observability.redaction import scrub
from service.settings import Settings

# Flat names, which Settings reads through its customised sources, not its typed __init__.
PRODUCTION: dict[str, Any] = {
    "environment": "production",
    "public_base_url": "https://mcp.example.com",
    "secret_key": "s" * 40,
    "stripe_secret_key": "sk_live_abcdefghijklmnop",
    "stripe_webhook_secret": "whsec_production",
    "request_state_keys": "cHJvZHVjdGlvbi1yZXF1ZXN0LXN0YXRlLWtleS0zMmJ5dGU=",
}


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer mcp_pat_abcdefghijklmnopqrstuvwxyz0123456789", "mcp_pat_abc"),
        ("got mcp_at_abcdefghijklmnopqrstuvwxyz from the client", "mcp_at_abc"),
        ("cookie: session=bs_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789", "bs_abc"),
        ("Set-Cookie: session=whatever; HttpOnly", "whatever"),
        ("card_number=4242424242424242&exp=12", "4242424242424242"),
        ("paid with 4242 4242 4242 4242 today", "4242 4242 4242 4242"),
        ("Stripe-Signature: t=1700000000,v1=" + "ab" * 32, "abab"),
        ("sig t=1,v1=" + "cd" * 32, "cdcd"),
        ("key sk_live_51HxyzABC and sk_test_123", "sk_live_51HxyzABC"),
        ("secret whsec_abcdef123", "whsec_abcdef123"),
        ('{"password": "hunter2"}', "hunter2"),
        ("client_secret=pi_123_secret_abc", "secret_abc"),
        ('{"id": "evt_1", "object": "event", "data": {"object": {"email": "a@b.c"}}}', "a@b.c"),
    ],
)
def test_scrub_removes_secrets(text: str, secret: str) -> None:
    assert secret not in scrub(text)


@pytest.mark.parametrize(
    "text",
    [
        "GET /pay/el_abc123 200",
        "stripe webhook evt_123 (invoice.paid): applied",
        "took 1234567890123 ns",  # 13 digits, fails the Luhn check
        "elicitation el_yfnR5idBWJrVk2HUvUoBWSamSKLFe74- created for usr_73cadaaf39cf0975f9415625",
    ],
)
def test_scrub_keeps_ordinary_text(text: str) -> None:
    assert scrub(text) == text


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_a_logged_python_repr_of_a_dict_has_its_password_redacted(log_format: str) -> None:
    stream = io.StringIO()
    logger = logging.getLogger("tests.observability.repr")
    logger.addHandler(build_handler(log_format, stream))  # type: ignore[arg-type]
    logger.propagate = False
    form = {"username": "alice", "password": "a long pass phrase", "client_secret": "x"}
    try:
        logger.warning("login form %r, again as %s", form, form)
    finally:
        logger.handlers.clear()
        logger.propagate = True
    line = stream.getvalue()
    assert "'username': 'alice'" in line, "ordinary fields stay readable"
    for secret in ("a long", "pass phrase", "'x'"):
        assert secret not in line, line
    assert "'password': '[REDACTED]'" in line


def test_json_line_shape_and_redacted_extras() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("tests.observability.json")
    logger.addHandler(build_handler("json", stream))
    logger.propagate = False
    try:
        logger.warning(
            "hello %s", "world", extra={"tool": "ascii_chart", "stripe_signature": "t=1,v1=abc", "n": 3}
        )
        try:
            raise ValueError("Bearer mcp_pat_abcdefghijklmnopqrstuvwxyz")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.handlers.clear()
        logger.propagate = True
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "hello world" and first["level"] == "WARNING"
    assert first["logger"] == "tests.observability.json"
    assert first["tool"] == "ascii_chart" and first["n"] == 3
    assert first["stripe_signature"] == "[REDACTED]"
    assert "request_id" not in first, "no request, no request id"
    assert "ValueError" in second["exception"] and "mcp_pat_abc" not in second["exception"]


def test_metrics_and_log_format_defaults() -> None:
    development = Settings(_env_file=None)
    assert development.metrics_served and development.observability.metrics_port == 0
    assert development.effective_log_format == "text"

    production = Settings(_env_file=None, **PRODUCTION)
    assert not production.metrics_served, "never public by accident"
    assert production.effective_log_format == "json"
    assert Settings(_env_file=None, metrics_port=9090, **PRODUCTION).metrics_served  # type: ignore[call-arg]
    assert Settings(_env_file=None, metrics_enabled=True, **PRODUCTION).metrics_served  # type: ignore[call-arg]
    assert not Settings(_env_file=None, metrics_enabled=False).metrics_served  # type: ignore[call-arg]


def test_a_text_line_cannot_be_forged_or_carry_terminal_escapes() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("tests.observability.forged")
    logger.addHandler(build_handler("text", stream))
    logger.propagate = False
    path = "/nope\n2026-12-06 03:00:19,000 INFO service.access [-]: POST /admin 200\r\x1b[31m\x85"
    try:
        logger.warning("GET %s 404", path)
    finally:
        logger.handlers.clear()
        logger.propagate = True
    [line] = stream.getvalue().split("\n")[:-1]
    assert "/nope\\x0a2026-12-06" in line
    assert "200\\x0d\\x1b[31m\\x85 404" in line
