"""`scrub`'s shortcut (one trigger search, a cache of short values) answers as every pattern does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from service.observability.redaction import (
    MAX_MESSAGE_CHARS,
    SCRUB_CACHE_MAX_CHARS,
    scrub,
    scrub_every_pattern,
)

# Pieces of every secret shape the patterns know, in mixed case, with the characters that match
# ASCII letters only case-insensitively (dotless i, long s, the Kelvin sign), and ordinary text.
PIECES = [
    "Bearer ",
    "BASIC ",
    "authorization: ",
    "Cookie=",
    "Set-Cookie: ",
    "stripe-signature:",
    "PASSWORD=",
    "passwd: ",
    "client_secret",
    "_secret_",
    "\u017fecret=",
    "token=",
    "TOKEN",
    "toKen:",
    "api_key=",
    "API-KEY: ",
    "apikey=",
    "code_ver\u0131fier=",
    "code_verifier=",
    "session=",
    "\u017fession=",
    "mcp_pat_",
    "mcp_at_",
    "mcp_rt_",
    "mcp_code_",
    "bs_",
    "sk_live_",
    "rk_test_",
    "pk_test_",
    "whsec_",
    "v1=",
    "v0=",
    '"object": "event"',
    '"object":"event"',
    "4242424242424242",
    "4242 4242 4242 4242",
    "4242-4242-4242-4242",
    "1234567890123",
    "abcdefghijklmnopqrstuvwxyz0123456789",
    "0123456789abcdef" * 2,
    "\u212a",
    "'",
    '"',
    " ",
    "=",
    ":",
    ",",
    "&",
    "\n",
    "é",
    "😀",
    "/mcp",
    "POST",
    "ascii_chart",
]
texts = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=12)), max_size=12).map("".join)


@settings(max_examples=1000, deadline=None)
@given(texts)
def test_the_shortcut_answers_as_every_pattern_does(text: str) -> None:
    assert scrub(text) == scrub_every_pattern(text)


@settings(max_examples=300, deadline=None)
@given(texts)
def test_a_cached_answer_is_the_same_answer(text: str) -> None:
    assert scrub(text) == scrub(text) == scrub_every_pattern(text)


def test_long_text_without_secrets_is_kept_whole_up_to_the_bound() -> None:
    words = "the quick brown fox jumps over the lazy dog " * 20
    assert len(words) > SCRUB_CACHE_MAX_CHARS
    assert scrub(words) == words
    huge = "x" * (MAX_MESSAGE_CHARS + 10)
    assert scrub(huge) == "x" * MAX_MESSAGE_CHARS + "…[truncated]" == scrub_every_pattern(huge)


def test_long_text_with_a_secret_is_scrubbed() -> None:
    text = "a long message " * 30 + "Authorization: Bearer mcp_pat_abcdefghijklmnopqrstuvwxyz"
    assert len(text) > SCRUB_CACHE_MAX_CHARS
    assert "mcp_pat_abc" not in scrub(text)


def test_secret_words_with_letters_that_only_fold_to_ascii_are_scrubbed() -> None:
    # Long s and dotless i match `s` and `i` case-insensitively, but do not lower-case to them.
    assert scrub("\u017fecret=hunter2") == scrub_every_pattern("\u017fecret=hunter2") != "\u017fecret=hunter2"
    assert (
        scrub("code_ver\u0131fier=abc")
        == scrub_every_pattern("code_ver\u0131fier=abc")
        != "code_ver\u0131fier=abc"
    )
