"""Defense in depth for log output: secrets, card numbers and webhook bodies never reach a log line.

The code does not log these in the first place; this scrubber is the net under that rule. It
knows the shapes of this service's own secrets (`mcp_pat_…`, `bs_…`), Stripe's keys and
signatures, bearer credentials, cookies, `key=value` pairs with a secret-looking key, and card
numbers (13 to 19 digits passing the Luhn check). A Stripe event payload is replaced as a whole.
"""

from __future__ import annotations

import functools
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


# A substring that each pattern above needs in order to match (each alternative is one pattern's
# fixed part, or a prefix of it), searched for in the lower-cased text: text without any of them
# is left as it is after one search instead of one per pattern (and some patterns backtrack on long
# words). tests/unit/observability/test_redaction_fast_path.py holds both paths to the same answers.
_TRIGGER = re.compile(
    r"bearer|basic|authorization|cookie|signature|passw|secret|token|api[_-]?key|code_verifier|"
    r"session|mcp_|bs_|_live_|_test_|whsec_|v[01]=|\"object\"|\d(?:[ -]?\d){12}"
)
# The two characters that match an ASCII letter of the patterns case-insensitively but do not
# lower-case to it: dotless i and long s.
_FOLD_FURTHER = (("\u0131", "i"), ("\u017f", "s"))
# Log lines repeat the same short values (methods, paths, tool names, outcomes, messages).
SCRUB_CACHE_MAX_CHARS = 256
SCRUB_CACHE_SIZE = 4096


def scrub(text: str) -> str:
    """`text` with every secret-shaped substring replaced."""
    if len(text) <= SCRUB_CACHE_MAX_CHARS:
        return _scrub_cached(text)
    return _scrub(text)


def _scrub(text: str) -> str:
    folded = text.lower()
    if not text.isascii():
        for char, ascii_letter in _FOLD_FURTHER:
            folded = folded.replace(char, ascii_letter)
    if _TRIGGER.search(folded) is None:
        return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + "…[truncated]"
    return scrub_every_pattern(text)


_scrub_cached = functools.lru_cache(maxsize=SCRUB_CACHE_SIZE)(_scrub)


def scrub_every_pattern(text: str) -> str:
    """`scrub` without the trigger search: every pattern tried (the reference the tests compare to)."""
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
    if sensitive_key(key):
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


def sensitive_key(key: str) -> bool:
    """Whether a field of this name is dropped to a marker, whatever its value."""
    return _judged_key(key) if len(key) <= 64 else _judge_key(key)


def _judge_key(key: str) -> bool:
    return SENSITIVE_KEY.search(key) is not None and key not in SAFE_KEYS


# Field names come from the code, a small set: each short one is judged once.
_judged_key = functools.lru_cache(maxsize=1024)(_judge_key)
