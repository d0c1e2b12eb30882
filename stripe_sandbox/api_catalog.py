"""Products, prices and customers."""

from __future__ import annotations

import re

from . import billing, objects, payments
from .api import Call, Obj, created_filter, paginate
from .catalog import new_customer, price_from_params
from .errors import StripeError, invalid_request, resource_missing
from .forms import Params, merge_metadata
from .ids import new_id


def _metadata_update(params: Params, current: dict[str, str]) -> dict[str, str]:
    return merge_metadata(current, params.metadata(), whole_cleared=params.raw("metadata") == "")


# Products --------------------------------------------------------------------------------------


def create_product(call: Call) -> Obj:
    call.allow("product.create")
    p, sandbox = call.params, call.sandbox
    product_id = p.string("id") or new_id("prod")
    if sandbox.store.get("product", product_id) is not None:
        raise invalid_request("Product already exists.", param="id", code="resource_already_exists")
    product = objects.product(
        id_=product_id,
        now=sandbox.now(),
        name=p.req_str("name"),
        active=p.boolean("active") is not False,
        description=p.string("description"),
        metadata=p.metadata() or {},
    )
    sandbox.store.put(product)
    sandbox.emit("product.created", product)
    default_price = p.sub("default_price_data")
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
    p, sandbox = call.params, call.sandbox
    product = sandbox.get("product", call.path["id"])
    before = sandbox.snapshot(product)
    if p.has("name"):
        product["name"] = p.req_str("name")
    if p.has("active"):
        product["active"] = p.boolean("active")
    if p.has("description"):
        product["description"] = p.string("description", allow_empty=True) or None
    if p.has("default_price"):
        price_id = p.string("default_price", allow_empty=True) or None
        if price_id is not None and sandbox.store.get("price", price_id) is None:
            raise resource_missing("price", price_id, param="default_price")
        product["default_price"] = price_id
    product["metadata"] = _metadata_update(p, product["metadata"])
    if product != before:
        product["updated"] = sandbox.now()
    sandbox.emit_updated("product.updated", before, product)
    return product


def list_products(call: Call) -> Obj:
    call.allow("product.list")
    p = call.params
    items = call.sandbox.store.newest_first("product")
    active = p.boolean("active")
    if active is not None:
        items = [i for i in items if i["active"] == active]
    ids = p.str_list("ids")
    if ids is not None:
        items = [i for i in items if i["id"] in ids]
    return paginate(p, created_filter(p, items), call.route_path, "product")


# Prices ----------------------------------------------------------------------------------------


def create_price(call: Call) -> Obj:
    call.allow("price.create")
    return price_from_params(call.sandbox, call.params, inline=False)


def retrieve_price(call: Call) -> Obj:
    return call.sandbox.get("price", call.path["id"])


def update_price(call: Call) -> Obj:
    call.allow("price.update")
    p, sandbox = call.params, call.sandbox
    price = sandbox.get("price", call.path["id"])
    before = sandbox.snapshot(price)
    if p.has("active"):
        price["active"] = p.boolean("active")
    if p.has("nickname"):
        price["nickname"] = p.string("nickname", allow_empty=True) or None
    if p.has("lookup_key"):
        key = p.string("lookup_key", allow_empty=True) or None
        holder = next(
            (
                x
                for x in sandbox.store.objects["price"].values()
                if key is not None and x["lookup_key"] == key
            ),
            None,
        )
        if holder is not None and holder is not price:
            if p.boolean("transfer_lookup_key") is not True:
                raise invalid_request(
                    f"A price (`{holder['id']}`) already uses that lookup key.", param="lookup_key"
                )
            holder_before = sandbox.snapshot(holder)
            holder["lookup_key"] = None
            sandbox.emit_updated("price.updated", holder_before, holder)
        price["lookup_key"] = key
    price["metadata"] = _metadata_update(p, price["metadata"])
    sandbox.emit_updated("price.updated", before, price)
    return price


def list_prices(call: Call) -> Obj:
    call.allow("price.list")
    p = call.params
    items = call.sandbox.store.newest_first("price")
    active = p.boolean("active")
    if active is not None:
        items = [i for i in items if i["active"] == active]
    for key in ("currency", "product", "type"):
        value = p.string(key)
        if value is not None:
            items = [i for i in items if i[key] == value]
    lookup_keys = p.str_list("lookup_keys")
    if lookup_keys is not None:
        if len(lookup_keys) > 10:
            raise invalid_request("You may only specify up to 10 lookup keys.", param="lookup_keys")
        items = [i for i in items if i["lookup_key"] in lookup_keys]
    recurring_params = p.sub("recurring")
    if recurring_params is not None:
        for key in ("interval", "usage_type", "meter"):
            wanted = recurring_params.string(key)
            if wanted is not None:
                items = [i for i in items if i["recurring"] and i["recurring"][key] == wanted]
    return paginate(p, created_filter(p, items), call.route_path, "price")


# Customers -------------------------------------------------------------------------------------


_LOCALES = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$")


def _customer_extras(p: Params, customer: Obj) -> Obj:
    """The customer fields beyond the basics, validated; returns the new values without applying."""
    changes: Obj = {}
    if p.has("address"):
        address = p.sub("address")
        if address is None:
            changes["address"] = None
        else:
            merged = dict(customer["address"] or objects.empty_address())
            for key in merged:
                if address.has(key):
                    merged[key] = address.string(key, allow_empty=True) or None
            changes["address"] = merged
    settings = p.sub("invoice_settings")
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
    if p.has("preferred_locales"):
        locales = p.str_list("preferred_locales") or []
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
    p, sandbox = call.params, call.sandbox
    clock_id = p.string("test_clock")
    if clock_id is not None:
        clock = sandbox.get("test_helpers.test_clock", clock_id, param="test_clock")
        if clock["status"] == "advancing":
            raise invalid_request("The test clock is advancing; wait until it is ready.", param="test_clock")
    with sandbox.on_clock(clock_id):
        return _create_customer(call, clock_id)


def _create_customer(call: Call, clock_id: str | None) -> Obj:
    p, sandbox = call.params, call.sandbox
    blank = objects.customer(
        id_="", now=0, email=None, name=None, phone=None, description=None, metadata={}, invoice_prefix=""
    )
    extras = _customer_extras(p, blank)
    first_id = p.string("payment_method")
    first = None if first_id is None else call.payment_method(first_id, "payment_method")
    if first is not None:
        payments.check_attachable(sandbox, first)
    _default_payment_method(call, "", extras, first)
    customer = new_customer(
        sandbox,
        email=p.string("email"),
        name=p.string("name"),
        phone=p.string("phone"),
        description=p.string("description"),
        metadata=p.metadata() or {},
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
    p, sandbox = call.params, call.sandbox
    customer = _live_customer(call)
    if customer.get("deleted"):
        raise resource_missing("customer", customer["id"])
    before = sandbox.snapshot(customer)
    extras = _customer_extras(p, customer)
    _default_payment_method(call, customer["id"], extras, None)
    for key in ("email", "name", "phone", "description"):
        if p.has(key):
            customer[key] = p.string(key, allow_empty=True) or None
    customer.update(extras)
    customer["metadata"] = _metadata_update(p, customer["metadata"])
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
    p = call.params
    items = [c for c in call.sandbox.store.newest_first("customer") if not c.get("deleted")]
    email = p.string("email")
    if email is not None:
        items = [c for c in items if c["email"] == email]
    clock = p.string("test_clock")
    if clock is not None:
        items = [c for c in items if c.get("test_clock") == clock]
    return paginate(p, created_filter(p, items), call.route_path, "customer")


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
    items = [o for o in call.sandbox.store.newest_first(kind) if not o.get("deleted")]
    for clause in re.split(r"\s+AND\s+", query):
        match = _CLAUSE.match(clause)
        if match is None or (match["field"] and match["field"] not in fields):
            raise StripeError(400, f"The sandbox cannot parse this search query: {clause!r}", param="query")
        if match["mkey"]:
            items = [o for o in items if o["metadata"].get(match["mkey"]) == match["value"]]
        else:
            items = [o for o in items if _search_text(o.get(match["field"])) == match["value"]]
    limit = call.params.integer("limit") or 10
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
