"""Defense in depth for log output: secrets, card numbers and webhook bodies never reach a log line.

The code does not log these in the first place; this scrubber is the net under that rule. It
knows the shapes of this service's own secrets (`mcp_pat_…`, `bs_…`), Stripe's keys and
signatures, bearer credentials, cookies, `key=value` pairs with a secret-looking key, and card
numbers (13 to 19 digits passing the Luhn check). A Stripe event payload is replaced as a whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

REDACTED = "[REDACTED]"
MAX_MESSAGE_CHARS = 8192

SENSITIVE_KEY = re.compile(
    r"(?i)(authorization|cookie|password|passwd|secret|token|signature|api[_-]?key|"
    r"card|cvc|cvv|pan|code_verifier|client_secret|credential|payload|body)"
)


def _redact_value(match: re.Match[str]) -> str:
    """`key: value` with the value replaced, keeping the quote it had, if any."""
    value = match.group(0)[match.end(2) - match.start(0) :]
    quote = value[0] if value[0] in "\"'" else ""
    return f"{match.group(1)}{match.group(2)}{quote}{REDACTED}{quote}"


_PATTERNS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    # Bearer / Basic credentials, whatever the token looks like.
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), rf"\1 {REDACTED}"),
    # Header or field lines: "Authorization: …", "Cookie: …", "Set-Cookie: …", "Stripe-Signature: …",
    # also as a JSON key or a Python repr's quoted key.
    (
        re.compile(r"(?i)\b(authorization|cookie|set-cookie|stripe-signature)([\"']?\s*[:=]\s*)[^\r\n]+"),
        rf"\1\2{REDACTED}",
    ),
    # key=value, "key": "value" (JSON) and 'key': 'value' (a Python repr) with a secret-looking key;
    # a quoted value is redacted up to its closing quote, spaces and all.
    (
        re.compile(
            r"(?i)\b([\w-]*(?:password|passwd|secret|token|signature|api[_-]?key|code_verifier|session)[\w-]*)"
            r"([\"']?\s*[:=]\s*)(?:\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[\"']?[^\s\"',;&}]+)"
        ),
        _redact_value,
    ),
    # This service's bearer secrets: personal/access/refresh tokens, OAuth codes, browser sessions.
    (re.compile(r"\bmcp_(?:pat|at|rt|code)_[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"\bbs_[A-Za-z0-9_-]{32,}"), REDACTED),
    # Stripe keys, webhook secrets, client secrets, signatures (t=…,v1=<hex>).
    (re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]+"), REDACTED),
    (re.compile(r"\bwhsec_[A-Za-z0-9_+/=-]+"), REDACTED),
    (re.compile(r"_secret_[A-Za-z0-9]+"), f"_secret_{REDACTED}"),
    (re.compile(r"\bv[01]=[0-9a-fA-F]{32,}"), f"v1={REDACTED}"),
)

_CARD_CANDIDATE = re.compile(r"(?<![\d.])\d(?:[ -]?\d){12,18}(?![\d.])")
_STRIPE_EVENT = re.compile(r"\"object\"\s*:\s*\"event\"")


def _luhn_valid(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _redact_card(match: re.Match[str]) -> str:
    digits = re.sub(r"[ -]", "", match.group(0))
    return "[REDACTED-PAN]" if _luhn_valid(digits) else match.group(0)


def scrub(text: str) -> str:
    """`text` with every secret-shaped substring replaced."""
    if _STRIPE_EVENT.search(text):
        return "[REDACTED: Stripe event payload]"
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    text = _CARD_CANDIDATE.sub(_redact_card, text)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + "…[truncated]"
    return text


def scrub_value(key: str, value: Any) -> Any:
    """An extra log field: secret-named keys are dropped to a marker, strings are scrubbed."""
    if SENSITIVE_KEY.search(key) and key not in SAFE_KEYS:
        return REDACTED
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, Mapping):
        return {str(k): scrub_value(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_value(key, item) for item in value]
    return value


# Fields of our own that match SENSITIVE_KEY by name but hold no secret.
SAFE_KEYS = frozenset({"token_id", "token_kind"})
