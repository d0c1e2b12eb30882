"""Products, prices and customers as the API and Checkout create them, and trial periods."""

from __future__ import annotations

import re
import secrets
import string

from . import objects
from .errors import invalid_request, parameter_missing, resource_missing
from .forms import Params
from .ids import new_id
from .objects import Obj
from .sandbox import Sandbox

DAY = 86400


MAX_TRIAL_DAYS = 730


def trial_end_of(sandbox: Sandbox, params: Params, *, now: int) -> int | None:
    """`trial_period_days` or `trial_end` (a timestamp, or `now` for no trial), validated as Stripe does."""
    days = params.integer("trial_period_days")
    end_raw = params.string("trial_end")
    if days is not None and end_raw is not None:
        raise invalid_request(
            "You may only specify one of these parameters: trial_end, trial_period_days.",
            param=params.param("trial_end"),
        )
    if days is not None:
        if days < 1 or days > MAX_TRIAL_DAYS:
            raise invalid_request(
                f"The trial period must be between 1 and {MAX_TRIAL_DAYS} days.",
                param=params.param("trial_period_days"),
            )
        return now + days * DAY
    if end_raw is None or end_raw == "now":
        return None
    end = params.integer("trial_end")
    assert end is not None
    if params.prefix and end < now + 48 * 3600:  # Checkout's `subscription_data` asks for two days
        raise invalid_request(
            "The `trial_end` date has to be at least 2 days in the future.", param=params.param("trial_end")
        )
    if end <= now:
        raise invalid_request(
            "Invalid timestamp: must be an integer Unix timestamp in the future.",
            param=params.param("trial_end"),
        )
    if end > now + MAX_TRIAL_DAYS * DAY:
        raise invalid_request(
            "The trial_end date cannot be more than 730 days in the future.", param=params.param("trial_end")
        )
    return end


_CURRENCY = re.compile(r"^[a-z]{3}$")


def price_from_params(sandbox: Sandbox, params: Params, *, inline: bool) -> Obj:
    """Create a price from `prices.create` params, or from `price_data` (inline, inactive)."""
    currency = params.req_str("currency").lower()
    if not _CURRENCY.match(currency):
        raise invalid_request(f"Invalid currency: {currency}.", param=params.param("currency"))
    unit_amount = params.integer("unit_amount")
    if unit_amount is None:
        raise parameter_missing(params.param("unit_amount"))
    if unit_amount < 0:
        raise invalid_request("Invalid non-negative integer", param=params.param("unit_amount"))
    product_id = params.string("product")
    product_data = params.sub("product_data")
    if product_id is None and product_data is None:
        raise parameter_missing(params.param("product"))
    if product_id is not None:
        if sandbox.store.get("product", product_id) is None:
            raise resource_missing("product", product_id, param=params.param("product"))
    else:
        assert product_data is not None
        product = objects.product(
            id_=new_id("prod"),
            now=sandbox.now(),
            name=product_data.req_str("name"),
            active=True,
            description=product_data.string("description"),
            metadata=product_data.metadata() or {},
        )
        sandbox.store.put(product)
        sandbox.emit("product.created", product)
        product_id = product["id"]
    recurring = None
    recurring_params = params.sub("recurring")
    if recurring_params is not None:
        interval = recurring_params.enum("interval", ("day", "week", "month", "year"), required=True)
        count = recurring_params.integer("interval_count") or 1
        if count < 1 or (interval == "year" and count > 3) or (interval == "month" and count > 36):
            raise invalid_request("Invalid interval_count.", param=recurring_params.param("interval_count"))
        recurring = objects.recurring(str(interval), count)
        _metered(sandbox, recurring_params, recurring)
    lookup_key = None if inline else params.string("lookup_key")
    if lookup_key is not None:
        holder = next(
            (other for other in sandbox.store.objects["price"].values() if other["lookup_key"] == lookup_key),
            None,
        )
        if holder is not None:
            if params.boolean("transfer_lookup_key") is not True:
                raise invalid_request(
                    f"A price (`{holder['id']}`) already uses that lookup key.",
                    param=params.param("lookup_key"),
                )
            before = sandbox.snapshot(holder)
            holder["lookup_key"] = None
            sandbox.emit_updated("price.updated", before, holder)
    price = objects.price(
        id_=new_id("price"),
        now=sandbox.now(),
        product_id=product_id,
        currency=currency,
        unit_amount=unit_amount,
        recurring=recurring,
        lookup_key=lookup_key,
        nickname=None if inline else params.string("nickname"),
        active=not inline and params.boolean("active") is not False,
        metadata={} if inline else (params.metadata() or {}),
    )
    sandbox.store.put(price)
    sandbox.emit("price.created", price)
    return price


def _metered(sandbox: Sandbox, recurring_params: Params, recurring: Obj) -> None:
    """`recurring[usage_type]=metered` with the `recurring[meter]` that counts its usage."""
    usage_type = recurring_params.enum("usage_type", ("licensed", "metered")) or "licensed"
    meter_id = recurring_params.string("meter")
    if usage_type == "metered" and meter_id is None:
        raise invalid_request(
            "You must provide a meter when creating a price with `usage_type=metered`.",
            param=recurring_params.param("meter"),
        )
    if meter_id is None:
        return
    if usage_type != "metered":
        raise invalid_request(
            "A meter can only be set on prices with `recurring[usage_type]=metered`.",
            param=recurring_params.param("meter"),
        )
    meter = sandbox.store.get("billing.meter", meter_id)
    if meter is None:
        raise resource_missing("billing.meter", meter_id, param=recurring_params.param("meter"))
    if meter["status"] != "active":
        raise invalid_request(
            f"The meter {meter_id} is inactive; a price needs an active meter.",
            param=recurring_params.param("meter"),
        )
    recurring.update(usage_type="metered", meter=meter_id)


def new_customer(
    sandbox: Sandbox,
    *,
    email: str | None,
    name: str | None,
    phone: str | None,
    description: str | None,
    metadata: dict[str, str],
    extras: Obj | None = None,
) -> Obj:
    prefix = "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(8))
    customer = objects.customer(
        id_=new_id("cus"),
        now=sandbox.now(),
        email=email,
        name=name,
        phone=phone,
        description=description,
        metadata=metadata,
        invoice_prefix=prefix,
    )
    customer.update(extras or {})
    sandbox.store.put(customer)
    sandbox.emit("customer.created", customer)
    return customer
