"""Plan changes: switching a subscription's prices or quantities, with Stripe's prorations.

`proration_behavior` is Stripe's: `create_prorations` (the default) credits the unused time of the
old price and charges the remaining time of the new one as proration lines on the next invoice;
`always_invoice` puts them on an invoice now and collects it; `none` changes the price from the
next period on. Amounts are each item's price times the fraction of the period left at
`proration_date`, rounded to the minor unit, as Stripe computes them. Changing the billing
interval (monthly to yearly) is not implemented and answers 400.
"""

from __future__ import annotations

from typing import Any

from . import objects_billing as objects_billing
from .errors import invalid_request, resource_missing
from .forms import Params
from .ids import new_id
from .objects import is_metered, plan_from_price
from .sandbox import Sandbox

Obj = dict[str, Any]
PRORATION_BEHAVIORS = ("always_invoice", "create_prorations", "none")


def _period(subscription: Obj) -> tuple[int, int]:
    item = subscription["items"]["data"][0]
    return int(item["current_period_start"]), int(item["current_period_end"])


def _price(sandbox: Sandbox, params: Params, key: str, currency: str) -> Obj:
    price_id = params.req_str(key)
    price = sandbox.store.get("price", price_id)
    if price is None:
        raise resource_missing("price", price_id, param=params.param(key))
    if not price["active"]:
        raise invalid_request(
            "The price specified is inactive. This field only accepts active prices.", param=params.param(key)
        )
    if not price["recurring"]:
        raise invalid_request(
            "The price specified is set to `type=one_time` but this field only accepts prices with "
            "`type=recurring`.",
            param=params.param(key),
        )
    if price["currency"] != currency:
        raise invalid_request(
            "All prices on a subscription must have the same currency.", param=params.param(key)
        )
    return price


def planned_items(sandbox: Sandbox, subscription: Obj, changes: list[Params]) -> list[Obj]:
    """The subscription's items after `items=[...]` (by `id`: change or `deleted`; without: add),
    validated, as new dicts; the subscription itself is not touched."""
    items = [dict(item) for item in subscription["items"]["data"]]
    by_id = {item["id"]: item for item in items}
    start, end = _period(subscription)
    interval = subscription["items"]["data"][0]["price"]["recurring"]
    for change in changes:
        item_id = change.string("id")
        if item_id is not None and item_id not in by_id:
            raise invalid_request(
                f"Subscription item {item_id} does not belong to this subscription.", param=change.param("id")
            )
        touched = by_id[item_id]["price"] if item_id is not None else None
        new_price = sandbox.store.get("price", change.string("price") or "")
        metered_new = new_price is not None and is_metered(new_price)
        if (touched is not None and is_metered(touched)) or (metered_new and item_id is not None):
            raise invalid_request(
                "Changing or removing items with metered prices is not implemented by the sandbox.",
                param=change.param("price" if new_price is not None else "id"),
            )
        if metered_new and change.has("quantity"):
            raise invalid_request(
                "You cannot set the quantity for metered plans.", param=change.param("quantity")
            )
        if change.boolean("deleted"):
            if item_id is None:
                raise invalid_request("An item to delete needs its `id`.", param=change.param("deleted"))
            items.remove(by_id[item_id])
            continue
        quantity = change.integer("quantity")
        if quantity is not None and quantity < 1:
            raise invalid_request(
                "This value must be greater than or equal to 1.", param=change.param("quantity")
            )
        if item_id is None:
            price = _price(sandbox, change, "price", subscription["currency"])
            items.append(
                objects_billing.subscription_item(
                    id_=new_id("si"),
                    now=sandbox.now(),
                    subscription_id=subscription["id"],
                    price=price,
                    quantity=None if is_metered(price) else quantity or 1,
                    start=start,
                    end=end,
                )
            )
            continue
        item = by_id[item_id]
        if change.has("price"):
            item["price"] = _price(sandbox, change, "price", subscription["currency"])
            item["plan"] = plan_from_price(item["price"])
        if quantity is not None:
            item["quantity"] = quantity
    if not items:
        raise invalid_request("A subscription needs at least one item.", param="items")
    for item in items:
        recurring = item["price"]["recurring"]
        if (recurring["interval"], recurring["interval_count"]) != (
            interval["interval"],
            interval["interval_count"],
        ):
            raise invalid_request(
                "Changing the billing interval of a subscription is not implemented by the sandbox.",
                param="items",
            )
    return items


def proration_lines(sandbox: Sandbox, subscription: Obj, new_items: list[Obj], at: int) -> list[Obj]:
    """Credit for the unused time of what changed, charge for the rest of the period of what replaces it."""
    start, end = _period(subscription)
    if not start <= at < end:
        return []
    left, whole = end - at, end - start
    # Metered items bill their usage in arrears at period end; nothing of theirs is prorated.
    old = {item["id"]: item for item in subscription["items"]["data"] if not is_metered(item["price"])}
    new = {item["id"]: item for item in new_items if not is_metered(item["price"])}
    lines: list[Obj] = []

    def line(item: Obj, sign: int, label: str) -> None:
        amount = sign * round(item["price"]["unit_amount"] * item["quantity"] * left / whole)
        entry = objects_billing.invoice_line(
            id_=new_id("il"), invoice_id="", item=item, subscription_id=subscription["id"], start=at, end=end
        )
        name = item["price"].get("nickname") or item["price"]["product"]
        entry.update(amount=amount, subtotal=amount, description=f"{label} {item['quantity']} x {name}")
        entry["parent"]["subscription_item_details"]["proration"] = True
        lines.append(entry)

    for item_id, before in old.items():
        after = new.get(item_id)
        unchanged = after is not None and (after["price"]["id"], after["quantity"]) == (
            before["price"]["id"],
            before["quantity"],
        )
        if not unchanged:
            line(before, -1, "Unused time on")
            if after is not None:
                line(after, 1, "Remaining time on")
    for item_id, after in new.items():
        if item_id not in old:
            line(after, 1, "Remaining time on")
    return lines


def apply(sandbox: Sandbox, subscription: Obj, new_items: list[Obj], behavior: str, at: int) -> list[Obj]:
    """Put `new_items` on the subscription; returns the proration lines it owes (none for `none`)."""
    lines = [] if behavior == "none" else proration_lines(sandbox, subscription, new_items, at)
    subscription["items"]["data"] = new_items
    return lines


def pending_lines(sandbox: Sandbox, subscription_id: str) -> list[Obj]:
    pending: list[Obj] = sandbox.store.priv(subscription_id).setdefault("pending_prorations", [])
    return pending
