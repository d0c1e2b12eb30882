"""Products, prices and customers through stripe-python."""

from __future__ import annotations

import pytest
import stripe

from tests.support.stripe_objects import expanded, present

from .conftest import Env, catalog


async def test_product_price_lifecycle_and_lookup_keys(env: Env) -> None:
    product, price = await catalog(env)
    assert price.unit_amount == 1500 and price.currency == "usd" and price.type == "recurring"
    assert price.recurring is not None and price.recurring.interval == "month"
    assert price.recurring.interval_count == 1
    assert (await env.client.v1.products.retrieve_async(product.id)).name == "Pro plan"
    found = await env.client.v1.prices.list_async(
        params={"lookup_keys": ["pro_monthly"], "expand": ["data.product"]}
    )
    assert found.object == "list"  # type: ignore[attr-defined]  # not in ListObject's types
    assert found.url == "/v1/prices" and found.has_more is False
    assert [p.id for p in found.data] == [price.id]
    assert expanded(found.data[0].product).name == "Pro plan"
    other = await env.client.v1.prices.create_async(
        params={"product": product.id, "currency": "usd", "unit_amount": 900}
    )
    assert other.type == "one_time" and other.recurring is None
    assert {p.id for p in (await env.client.v1.prices.list_async(params={"product": product.id})).data} == {
        price.id,
        other.id,
    }
    updated = await env.client.v1.products.update_async(
        product.id, params={"name": "Pro", "default_price": price.id}
    )
    assert updated.name == "Pro" and updated.default_price == price.id


async def test_lookup_key_is_unique_unless_transferred(env: Env) -> None:
    product, first = await catalog(env)
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.prices.create_async(
            params={"product": product.id, "currency": "usd", "unit_amount": 1, "lookup_key": "pro_monthly"}
        )
    assert info.value.param == "lookup_key" and first.id in str(info.value.user_message)
    second = await env.client.v1.prices.create_async(
        params={
            "product": product.id,
            "currency": "usd",
            "unit_amount": 2000,
            "recurring": {"interval": "year"},
            "lookup_key": "pro_monthly",
            "transfer_lookup_key": True,
        }
    )
    found = await env.client.v1.prices.list_async(params={"lookup_keys": ["pro_monthly"]})
    assert [p.id for p in found.data] == [second.id]
    assert (await env.client.v1.prices.retrieve_async(first.id)).lookup_key is None


async def test_customers_crud_metadata_semantics_and_search(env: Env) -> None:
    customer = await env.client.v1.customers.create_async(
        params={"email": "ada@example.com", "name": "Ada", "metadata": {"a": "1", "b": "2"}}
    )
    assert customer.id.startswith("cus_") and customer.livemode is False
    updated = await env.client.v1.customers.update_async(
        customer.id, params={"metadata": {"a": "", "c": "3"}, "name": "Ada L."}
    )
    assert present(updated.metadata).to_dict() == {"b": "2", "c": "3"} and updated.name == "Ada L."
    assert (await env.client.v1.customers.retrieve_async(customer.id)).email == "ada@example.com"
    listed = await env.client.v1.customers.list_async(params={"email": "ada@example.com"})
    assert [c.id for c in listed.data] == [customer.id]
    result = await env.client.v1.customers.search_async(params={"query": "email:'ada@example.com'"})
    assert [c.id for c in result.data] == [customer.id]
    result = await env.client.v1.customers.search_async(params={"query": "metadata['c']:'3'"})
    assert [c.id for c in result.data] == [customer.id]
    deleted = await env.client.v1.customers.delete_async(customer.id)
    assert deleted.deleted is True
    retrieved = await env.client.v1.customers.retrieve_async(customer.id)
    assert retrieved.to_dict().get("deleted") is True


async def test_search_pages_like_a_list_and_refuses_a_limit_past_100(env: Env) -> None:
    ids = [(await env.client.v1.customers.create_async(params={"name": "same"})).id for _ in range(3)]
    result = await env.client.v1.customers.search_async(params={"query": "name:'same'", "limit": 2})
    assert [c.id for c in result.data] == ids[::-1][:2] and result.has_more is True
    for limit in (0, 101):
        with pytest.raises(stripe.InvalidRequestError) as info:
            await env.client.v1.customers.search_async(params={"query": "name:'same'", "limit": limit})
        assert info.value.param == "limit"


async def test_pagination_newest_first_with_cursors(env: Env) -> None:
    ids = [(await env.client.v1.customers.create_async(params={"name": f"c{i}"})).id for i in range(5)]
    page = await env.client.v1.customers.list_async(params={"limit": 2})
    assert [c.id for c in page.data] == ids[::-1][:2] and page.has_more is True
    nxt = await env.client.v1.customers.list_async(params={"limit": 2, "starting_after": page.data[-1].id})
    assert [c.id for c in nxt.data] == ids[::-1][2:4]
    back = await env.client.v1.customers.list_async(params={"limit": 2, "ending_before": nxt.data[0].id})
    assert [c.id for c in back.data] == ids[::-1][:2]
    every = [
        c.id async for c in (await env.client.v1.customers.list_async(params={"limit": 2})).auto_paging_iter()
    ]
    assert every == ids[::-1]
    with pytest.raises(stripe.InvalidRequestError) as info:
        await env.client.v1.customers.list_async(params={"limit": 101})
    assert info.value.param == "limit"
