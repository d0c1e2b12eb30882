"""Stripe-shaped errors, authentication and idempotency, seen through stripe-python's exceptions."""

from __future__ import annotations

import pytest
import stripe

from stripe_sandbox.forms import parse_pairs
from stripe_sandbox.idempotency import IdempotencyKeys, SavedAnswer
from tests.support.stripe_objects import error_json

from .conftest import Env, catalog, stripe_client


async def test_missing_and_wrong_api_key_raise_authentication_error(env: Env) -> None:
    async with stripe_client(env.base_url, api_key="sk_test_wrong_key_123456") as wrong:
        with pytest.raises(stripe.AuthenticationError) as info:
            await wrong.v1.customers.list_async()
    assert info.value.http_status == 401
    assert "Invalid API Key provided" in str(info.value.user_message)
    assert error_json(info.value)["type"] == "invalid_request_error"
    async with stripe_client(env.base_url, api_key="") as empty:
        with pytest.raises(stripe.AuthenticationError) as info:
            await empty.raw_request_async("get", "/v1/customers", headers={"Authorization": ""})
    assert info.value.http_status == 401


async def test_unknown_ids_are_resource_missing(env: Env) -> None:
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.subscriptions.retrieve_async("sub_missing")
    error = info.value
    assert (error.http_status, error.code, error.param) == (404, "resource_missing", "id")
    assert error.user_message == "No such subscription: 'sub_missing'"
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.checkout.sessions.create_async(
            params={
                "mode": "subscription",
                "line_items": [{"price": "price_missing", "quantity": 1}],
                "success_url": "https://app.example/ok",
            }
        )
    assert (info.value.http_status, info.value.code, info.value.param) == (
        400,
        "resource_missing",
        "line_items[0][price]",
    )


async def test_missing_unknown_and_invalid_parameters(env: Env) -> None:
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.products.create_async(params={})  # type: ignore[typeddict-item]
    assert (info.value.code, info.value.param) == ("parameter_missing", "name")
    assert info.value.user_message == "Missing required param: name."
    with pytest.raises(stripe.InvalidRequestError) as info:
        # A misspelt parameter, on purpose.
        await env.client.v1.customers.create_async(params={"emial": "x@example.com"})  # type: ignore[arg-type]
    assert (info.value.code, info.value.param) == ("parameter_unknown", "emial")
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.prices.create_async(
            params={"product": "prod_x", "currency": "usd", "unit_amount": "ten"}  # type: ignore[typeddict-item]
        )
    assert (info.value.code, info.value.param) == ("parameter_invalid_integer", "unit_amount")
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.raw_request_async("get", "/v1/nothing_here")
    assert info.value.http_status == 404 and "Unrecognized request URL" in str(info.value.user_message)


async def test_idempotency_replays_same_request_and_rejects_a_different_one(env: Env) -> None:
    options: stripe.RequestOptions = {"idempotency_key": "create-ada-1"}
    first = await env.client.v1.customers.create_async(params={"email": "ada@example.com"}, options=options)
    again = await env.client.v1.customers.create_async(params={"email": "ada@example.com"}, options=options)
    assert again.id == first.id
    assert again.last_response is not None
    assert again.last_response.headers.get("Idempotent-Replayed") == "true"
    assert first.last_response is not None and "Idempotent-Replayed" not in first.last_response.headers
    listed = await env.client.v1.customers.list_async()
    assert [c.id for c in listed.data] == [first.id]
    with pytest.raises(stripe.IdempotencyError) as info:
        await env.client.v1.customers.create_async(params={"email": "bob@example.com"}, options=options)
    assert info.value.http_status == 400
    assert error_json(info.value)["type"] == "idempotency_error"
    # Errors are replayed too: the same failing request gives the same answer.
    bad: stripe.RequestOptions = {"idempotency_key": "bad-price"}
    for _ in range(2):
        with pytest.raises(stripe.InvalidRequestError):
            await env.client.v1.prices.create_async(params={"currency": "usd", "unit_amount": 1}, options=bad)


async def test_an_idempotency_key_is_forgotten_after_24_hours(env: Env) -> None:
    options: stripe.RequestOptions = {"idempotency_key": "create-cy-1"}
    first = await env.client.v1.customers.create_async(params={"email": "cy@example.com"}, options=options)
    await env.advance(24 * 3600 - 60)
    with pytest.raises(stripe.IdempotencyError):
        await env.client.v1.customers.create_async(params={"email": "di@example.com"}, options=options)
    await env.advance(60)
    other = await env.client.v1.customers.create_async(params={"email": "di@example.com"}, options=options)
    assert other.id != first.id
    assert other.last_response is not None and "Idempotent-Replayed" not in other.last_response.headers


def test_the_sandbox_keeps_a_bounded_number_of_idempotency_keys() -> None:
    keys = IdempotencyKeys(max_keys=3)
    for number in range(5):
        keys.save("sk_test", f"key-{number}", SavedAnswer("f", 200, b"{}", saved_at=0))
    assert len(keys) == 3
    assert keys.get("sk_test", "key-1", now=0) is None, "the oldest are dropped first"
    assert keys.get("sk_test", "key-4", now=0) is not None


async def test_card_error_from_test_helper_payment(env: Env) -> None:
    _product, price = await catalog(env)
    session = await env.client.v1.checkout.sessions.create_async(
        params={"mode": "subscription", "line_items": [{"price": price.id, "quantity": 1}]}
    )
    with pytest.raises(stripe.CardError) as info:
        await env.raw(f"/v1/test_helpers/checkout/sessions/{session.id}/pay", card_number="4000000000009995")
    assert info.value.http_status == 402
    assert (info.value.code, error_json(info.value)["decline_code"]) == (
        "card_declined",
        "insufficient_funds",
    )


def test_form_parsing_matches_stripe_bracket_syntax() -> None:
    tree = parse_pairs(
        [
            ("line_items[0][price]", "price_a"),
            ("line_items[0][quantity]", "1"),
            ("line_items[1][price]", "price_b"),
            ("metadata[plan]", "pro"),
            ("expand[]", "subscription"),
            ("expand[]", "line_items"),
            ("subscription_data[metadata][k]", "v"),
        ]
    )
    assert tree == {
        "line_items": {"0": {"price": "price_a", "quantity": "1"}, "1": {"price": "price_b"}},
        "metadata": {"plan": "pro"},
        "expand": {"0": "subscription", "1": "line_items"},
        "subscription_data": {"metadata": {"k": "v"}},
    }
