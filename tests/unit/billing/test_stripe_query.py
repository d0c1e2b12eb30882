"""Stripe's form encoding of GET parameters, as `StripeReads` sends them."""

from __future__ import annotations

from urllib.parse import parse_qsl

from service.billing.stripe_reads import encode_query


def test_flat_parameters_keep_their_order() -> None:
    assert parse_qsl(encode_query({"customer": "cus_1", "limit": 100})) == [
        ("customer", "cus_1"),
        ("limit", "100"),
    ]


def test_nested_mappings_and_lists_use_brackets() -> None:
    query = encode_query({"created": {"gte": 1700000000}, "expand": ["data.customer", "data.invoice"]})
    assert parse_qsl(query) == [
        ("created[gte]", "1700000000"),
        ("expand[0]", "data.customer"),
        ("expand[1]", "data.invoice"),
    ]


def test_booleans_are_words_and_none_is_left_out() -> None:
    assert parse_qsl(encode_query({"active": False, "deleted": True, "cursor": None})) == [
        ("active", "false"),
        ("deleted", "true"),
    ]


def test_values_are_escaped() -> None:
    assert encode_query({"email": "a+b@example.com"}) == "email=a%2Bb%40example.com"
