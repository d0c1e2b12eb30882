"""Products, prices and customers."""

from __future__ import annotations

import re

from . import billing, objects, payments
from .api import Call, Obj, created_filter, page_limit, paginate
from .catalog import new_customer, price_from_params
from .errors import StripeError, invalid_request, resource_missing
from .forms import Params, merge_metadata
from .ids import new_id


def _metadata_update(params: Params, current: dict[str, str]) -> dict[str, str]:
    return merge_metadata(current, params.metadata(), whole_cleared=params.raw("metadata") == "")


# Products --------------------------------------------------------------------------------------


def create_product(call: Call) -> Obj:
    call.allow("product.create")
    params, sandbox = call.params, call.sandbox
    product_id = params.string("id") or new_id("prod")
    if sandbox.store.get("product", product_id) is not None:
        raise invalid_request("Product already exists.", param="id", code="resource_already_exists")
    product = objects.product(
        id_=product_id,
        now=sandbox.now(),
        name=params.req_str("name"),
        active=params.boolean("active") is not False,
        description=params.string("description"),
        metadata=params.metadata() or {},
    )
    sandbox.store.put(product)
    sandbox.emit("product.created", product)
    default_price = params.sub("default_price_data")
    if default_price is not None:
        default_price.tree["product"] = product_id
        price = price_from_params(sandbox, default_price, inline=False)
        before = sandbox.snapshot(product)
        product["default_price"] = price["id"]
        sandbox.emit_updated("product.updated", before, product)
    return product


def retrieve_product(call: Call) -> Obj:
    return call.sandbox.get("product", call.path["id"])


def update_product(call: Call) -> Obj:
    call.allow("product.update")
    params, sandbox = call.params, call.sandbox
    product = sandbox.get("product", call.path["id"])
    before = sandbox.snapshot(product)
    if params.has("name"):
        product["name"] = params.req_str("name")
    if params.has("active"):
        product["active"] = params.boolean("active")
    if params.has("description"):
        product["description"] = params.string("description", allow_empty=True) or None
    if params.has("default_price"):
        price_id = params.string("default_price", allow_empty=True) or None
        if price_id is not None and sandbox.store.get("price", price_id) is None:
            raise resource_missing("price", price_id, param="default_price")
        product["default_price"] = price_id
    product["metadata"] = _metadata_update(params, product["metadata"])
    if product != before:
        product["updated"] = sandbox.now()
    sandbox.emit_updated("product.updated", before, product)
    return product


def list_products(call: Call) -> Obj:
    call.allow("product.list")
    params = call.params
    items = call.sandbox.store.newest_first("product")
    active = params.boolean("active")
    if active is not None:
        items = [item for item in items if item["active"] == active]
    ids = params.str_list("ids")
    if ids is not None:
        items = [item for item in items if item["id"] in ids]
    return paginate(params, created_filter(params, items), call.route_path, "product")


# Prices ----------------------------------------------------------------------------------------


def create_price(call: Call) -> Obj:
    call.allow("price.create")
    return price_from_params(call.sandbox, call.params, inline=False)


def retrieve_price(call: Call) -> Obj:
    return call.sandbox.get("price", call.path["id"])


def update_price(call: Call) -> Obj:
    call.allow("price.update")
    params, sandbox = call.params, call.sandbox
    price = sandbox.get("price", call.path["id"])
    before = sandbox.snapshot(price)
    if params.has("active"):
        price["active"] = params.boolean("active")
    if params.has("nickname"):
        price["nickname"] = params.string("nickname", allow_empty=True) or None
    if params.has("lookup_key"):
        key = params.string("lookup_key", allow_empty=True) or None
        holder = next(
            (
                other
                for other in sandbox.store.objects["price"].values()
                if key is not None and other["lookup_key"] == key
            ),
            None,
        )
        if holder is not None and holder is not price:
            if params.boolean("transfer_lookup_key") is not True:
                raise invalid_request(
                    f"A price (`{holder['id']}`) already uses that lookup key.", param="lookup_key"
                )
            holder_before = sandbox.snapshot(holder)
            holder["lookup_key"] = None
            sandbox.emit_updated("price.updated", holder_before, holder)
        price["lookup_key"] = key
    price["metadata"] = _metadata_update(params, price["metadata"])
    sandbox.emit_updated("price.updated", before, price)
    return price


def list_prices(call: Call) -> Obj:
    call.allow("price.list")
    params = call.params
    items = call.sandbox.store.newest_first("price")
    active = params.boolean("active")
    if active is not None:
        items = [item for item in items if item["active"] == active]
    for key in ("currency", "product", "type"):
        value = params.string(key)
        if value is not None:
            items = [item for item in items if item[key] == value]
    lookup_keys = params.str_list("lookup_keys")
    if lookup_keys is not None:
        if len(lookup_keys) > 10:
            raise invalid_request("You may only specify up to 10 lookup keys.", param="lookup_keys")
        items = [item for item in items if item["lookup_key"] in lookup_keys]
    recurring_params = params.sub("recurring")
    if recurring_params is not None:
        for key in ("interval", "usage_type", "meter"):
            wanted = recurring_params.string(key)
            if wanted is not None:
                items = [item for item in items if item["recurring"] and item["recurring"][key] == wanted]
    return paginate(params, created_filter(params, items), call.route_path, "price")


# Customers -------------------------------------------------------------------------------------


_LOCALES = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$")


def _customer_extras(params: Params, customer: Obj) -> Obj:
    """The customer fields beyond the basics, validated; returns the new values without applying."""
    changes: Obj = {}
    if params.has("address"):
        address = params.sub("address")
        if address is None:
            changes["address"] = None
        else:
            merged = dict(customer["address"] or objects.empty_address())
            for key in merged:
                if address.has(key):
                    merged[key] = address.string(key, allow_empty=True) or None
            changes["address"] = merged
    settings = params.sub("invoice_settings")
    if settings is not None and settings.has("default_payment_method"):
        changes.setdefault("invoice_settings", dict(customer["invoice_settings"]))
        changes["invoice_settings"]["default_payment_method"] = (
            settings.string("default_payment_method", allow_empty=True) or None
        )
    if settings is not None and settings.has("footer"):
        footer = settings.string("footer", allow_empty=True) or None
        if footer is not None and len(footer) > 5000:
            raise invalid_request(
                "Invoice footer can have up to 5000 characters.", param=settings.param("footer")
            )
        changes.setdefault("invoice_settings", dict(customer["invoice_settings"]))
        changes["invoice_settings"]["footer"] = footer
    if params.has("preferred_locales"):
        locales = params.str_list("preferred_locales") or []
        if len(locales) > 10:
            raise invalid_request("You may only specify up to 10 locales.", param="preferred_locales")
        for index, locale in enumerate(locales):
            if not _LOCALES.match(locale):
                raise invalid_request(f"Invalid locale: {locale}", param=f"preferred_locales[{index}]")
        changes["preferred_locales"] = locales
    return changes


def _default_payment_method(call: Call, customer_id: str, extras: Obj, attaching: Obj | None) -> None:
    """Check `invoice_settings.default_payment_method` names a card of this customer (or the one
    being attached in the same request) and store its real id in `extras`."""
    wanted = (extras.get("invoice_settings") or {}).get("default_payment_method")
    if wanted is None:
        return
    payment_method = call.payment_method(wanted, "invoice_settings[default_payment_method]")
    if payment_method is not attaching and payment_method["customer"] != customer_id:
        raise invalid_request(
            f"The customer does not have a payment method with the ID {wanted}. The payment method must "
            "be attached to the customer.",
            param="invoice_settings[default_payment_method]",
        )
    extras["invoice_settings"]["default_payment_method"] = payment_method["id"]


def create_customer(call: Call) -> Obj:
    call.allow("customer.create")
    params, sandbox = call.params, call.sandbox
    clock_id = params.string("test_clock")
    if clock_id is not None:
        clock = sandbox.get("test_helpers.test_clock", clock_id, param="test_clock")
        if clock["status"] == "advancing":
            raise invalid_request("The test clock is advancing; wait until it is ready.", param="test_clock")
    with sandbox.on_clock(clock_id):
        return _create_customer(call, clock_id)


def _create_customer(call: Call, clock_id: str | None) -> Obj:
    params, sandbox = call.params, call.sandbox
    blank = objects.customer(
        id_="", now=0, email=None, name=None, phone=None, description=None, metadata={}, invoice_prefix=""
    )
    extras = _customer_extras(params, blank)
    first_id = params.string("payment_method")
    first = None if first_id is None else call.payment_method(first_id, "payment_method")
    if first is not None:
        payments.check_attachable(sandbox, first)
    _default_payment_method(call, "", extras, first)
    customer = new_customer(
        sandbox,
        email=params.string("email"),
        name=params.string("name"),
        phone=params.string("phone"),
        description=params.string("description"),
        metadata=params.metadata() or {},
        extras={**extras, "test_clock": clock_id},
    )
    if first is not None:
        payments.attach(sandbox, first, customer["id"])
    return customer


def _live_customer(call: Call) -> Obj:
    customer = call.sandbox.get("customer", call.path["id"])
    return customer


def retrieve_customer(call: Call) -> Obj:
    return _live_customer(call)


def update_customer(call: Call) -> Obj:
    call.allow("customer.update")
    params, sandbox = call.params, call.sandbox
    customer = _live_customer(call)
    if customer.get("deleted"):
        raise resource_missing("customer", customer["id"])
    before = sandbox.snapshot(customer)
    extras = _customer_extras(params, customer)
    _default_payment_method(call, customer["id"], extras, None)
    for key in ("email", "name", "phone", "description"):
        if params.has(key):
            customer[key] = params.string(key, allow_empty=True) or None
    customer.update(extras)
    customer["metadata"] = _metadata_update(params, customer["metadata"])
    sandbox.emit_updated("customer.updated", before, customer)
    return customer


def delete_customer(call: Call) -> Obj:
    sandbox = call.sandbox
    customer = _live_customer(call)
    if customer.get("deleted"):
        raise resource_missing("customer", customer["id"])
    for subscription in sandbox.store.objects["subscription"].values():
        if subscription["customer"] == customer["id"] and subscription["status"] != "canceled":
            billing.cancel_now(sandbox, subscription, ended_at=sandbox.now(), reason="cancellation_requested")
    snapshot = sandbox.snapshot(customer)
    sandbox.store.put(objects.deleted("customer", customer["id"]))
    sandbox.emit("customer.deleted", snapshot)
    return objects.deleted("customer", customer["id"])


def list_customers(call: Call) -> Obj:
    call.allow("customer.list")
    params = call.params
    items = [
        customer for customer in call.sandbox.store.newest_first("customer") if not customer.get("deleted")
    ]
    email = params.string("email")
    if email is not None:
        items = [customer for customer in items if customer["email"] == email]
    clock = params.string("test_clock")
    if clock is not None:
        items = [customer for customer in items if customer.get("test_clock") == clock]
    return paginate(params, created_filter(params, items), call.route_path, "customer")


_CLAUSE = re.compile(
    r"""^\s*(metadata\[['"](?P<mkey>[^'"]+)['"]\]|(?P<field>[a-z_]+))\s*:\s*['"](?P<value>[^'"]*)['"]\s*$"""
)


def _search_text(value: object) -> str:
    """A field as the query language writes it: booleans are `true` / `false`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def search(call: Call, kind: str, endpoint: str, fields: tuple[str, ...]) -> Obj:
    """Stripe's search query language, for the clauses the service can use: exact `field:'v'`
    and `metadata['k']:'v'`, joined by AND."""
    call.allow(endpoint)
    query = call.params.req_str("query")
    limit = page_limit(call.params)
    items = [found for found in call.sandbox.store.newest_first(kind) if not found.get("deleted")]
    for clause in re.split(r"\s+AND\s+", query):
        match = _CLAUSE.match(clause)
        if match is None or (match["field"] and match["field"] not in fields):
            raise StripeError(400, f"The sandbox cannot parse this search query: {clause!r}", param="query")
        if match["mkey"]:
            items = [found for found in items if found["metadata"].get(match["mkey"]) == match["value"]]
        else:
            items = [found for found in items if _search_text(found.get(match["field"])) == match["value"]]
    return {
        "object": "search_result",
        "data": items[:limit],
        "has_more": len(items) > limit,
        "next_page": None,
        "url": call.route_path,
    }


def search_customers(call: Call) -> Obj:
    return search(call, "customer", "customer.search", ("email", "name", "phone"))


def search_products(call: Call) -> Obj:
    return search(call, "product", "product.search", ("active", "name", "description", "shippable", "url"))


def search_prices(call: Call) -> Obj:
    return search(call, "price", "price.search", ("active", "currency", "lookup_key", "product", "type"))
