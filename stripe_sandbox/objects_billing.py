"""Builders for subscriptions, invoices and money movement.

Shaped for the pinned API version (basil and later): billing periods live on subscription items,
not on the subscription; invoices point at their subscription through
`parent.subscription_details.subscription` and at their payments through `invoice_payment`
objects, no longer through top-level `subscription`, `charge` or `payment_intent` fields. Service
code that follows older tutorials (e.g. `invoice.subscription`) therefore fails here exactly as it
would against real Stripe.
"""

from __future__ import annotations

from .objects import Obj, list_envelope, plan_from_price


def subscription_item(
    *, id_: str, now: int, subscription_id: str, price: Obj, quantity: int | None, start: int, end: int
) -> Obj:
    """An item; one with a metered price has no `quantity` at all, as on Stripe."""
    item: Obj = {
        "id": id_,
        "object": "subscription_item",
        "billing_thresholds": None,
        "created": now,
        "current_period_end": end,
        "current_period_start": start,
        "discounts": [],
        "metadata": {},
        "plan": plan_from_price(price),
        "price": price,
        "quantity": quantity,
        "subscription": subscription_id,
        "tax_rates": [],
    }
    if quantity is None:
        del item["quantity"]
    return item


def subscription(
    *, id_: str, now: int, customer_id: str, currency: str, items: list[Obj], metadata: dict[str, str]
) -> Obj:
    return {
        "id": id_,
        "object": "subscription",
        "application": None,
        "application_fee_percent": None,
        "automatic_tax": {"disabled_reason": None, "enabled": False, "liability": None},
        "billing_cycle_anchor": now,
        "billing_cycle_anchor_config": None,
        "billing_mode": {"flexible": None, "type": "classic"},
        "billing_schedules": [],
        "billing_thresholds": None,
        "cancel_at": None,
        "cancel_at_period_end": False,
        "canceled_at": None,
        "cancellation_details": {"comment": None, "feedback": None, "reason": None},
        "collection_method": "charge_automatically",
        "created": now,
        "currency": currency,
        "customer": customer_id,
        "customer_account": None,
        "days_until_due": None,
        "default_payment_method": None,
        "default_source": None,
        "default_tax_rates": [],
        "description": None,
        "discounts": [],
        "ended_at": None,
        "invoice_settings": {"account_tax_ids": None, "issuer": {"type": "self"}},
        "items": list_envelope(items, f"/v1/subscription_items?subscription={id_}"),
        "latest_invoice": None,
        "livemode": False,
        "managed_payments": None,
        "metadata": metadata,
        "next_pending_invoice_item_invoice": None,
        "on_behalf_of": None,
        "pause_collection": None,
        "payment_settings": {
            "payment_method_options": None,
            "payment_method_types": None,
            "save_default_payment_method": "off",
        },
        "pending_invoice_item_interval": None,
        "pending_setup_intent": None,
        "pending_update": None,
        "schedule": None,
        "start_date": now,
        "status": "active",
        "test_clock": None,
        "transfer_data": None,
        "trial_end": None,
        "trial_settings": {"end_behavior": {"missing_payment_method": "create_invoice"}},
        "trial_start": None,
    }


def invoice_line(
    *,
    id_: str,
    invoice_id: str,
    item: Obj,
    subscription_id: str,
    start: int,
    end: int,
    usage: int | None = None,
) -> Obj:
    """A line for `item` over `[start, end)`: its quantity, or for a metered item the `usage` its
    meter counted (none yet: 0)."""
    price = item["price"]
    quantity = int(item["quantity"]) if "quantity" in item else max(usage or 0, 0)
    amount = price["unit_amount"] * quantity
    return {
        "id": id_,
        "object": "line_item",
        "amount": amount,
        "currency": price["currency"],
        "description": f"{quantity} x {price.get('nickname') or price['product']}",
        "discount_amounts": [],
        "discountable": True,
        "discounts": [],
        "invoice": invoice_id,
        "livemode": False,
        "metadata": {},
        "parent": {
            "invoice_item_details": None,
            "subscription_item_details": {
                "invoice_item": None,
                "proration": False,
                "proration_details": {"credited_items": None},
                "subscription": subscription_id,
                "subscription_item": item["id"],
            },
            "type": "subscription_item_details",
        },
        "period": {"end": end, "start": start},
        "pretax_credit_amounts": [],
        "pricing": {
            "price_details": {"price": price["id"], "product": price["product"]},
            "type": "price_details",
            "unit_amount_decimal": price["unit_amount_decimal"],
        },
        "quantity": quantity,
        "quantity_decimal": str(quantity),
        "subscription": subscription_id,
        "subtotal": amount,
        "taxes": [],
    }


def invoice(
    *,
    id_: str,
    now: int,
    customer: Obj,
    subscription: Obj,
    lines: list[Obj],
    billing_reason: str,
    number: str,
    period_start: int,
    period_end: int,
) -> Obj:
    total = sum(int(line["amount"]) for line in lines)
    return {
        "id": id_,
        "object": "invoice",
        "account_country": "US",
        "account_name": "Stripe sandbox",
        "account_tax_ids": None,
        "amount_due": total,
        "amount_overpaid": 0,
        "amount_paid": 0,
        "amount_remaining": total,
        "amount_shipping": 0,
        "application": None,
        "attempt_count": 0,
        "attempted": False,
        "auto_advance": True,
        "automatic_tax": {
            "disabled_reason": None,
            "enabled": False,
            "liability": None,
            "provider": None,
            "status": None,
        },
        "automatically_finalizes_at": None,
        "billing_reason": billing_reason,
        "collection_method": "charge_automatically",
        "created": now,
        "currency": subscription["currency"],
        "custom_fields": None,
        "customer": customer["id"],
        "customer_account": None,
        "customer_address": customer["address"],
        "customer_email": customer["email"],
        "customer_name": customer["name"],
        "customer_phone": customer["phone"],
        "customer_shipping": customer["shipping"],
        "customer_tax_exempt": "none",
        "customer_tax_ids": [],
        "default_payment_method": None,
        "default_source": None,
        "default_tax_rates": [],
        "description": None,
        "discounts": [],
        "due_date": None,
        "effective_at": now,
        "ending_balance": 0,
        "footer": None,
        "from_invoice": None,
        "hosted_invoice_url": None,
        "invoice_pdf": None,
        "issuer": {"type": "self"},
        "last_finalization_error": None,
        "latest_revision": None,
        "lines": list_envelope(lines, f"/v1/invoices/{id_}/lines"),
        "livemode": False,
        "metadata": {},
        "next_payment_attempt": None,
        "number": number,
        "on_behalf_of": None,
        "parent": {
            "quote_details": None,
            "subscription_details": {
                "metadata": dict(subscription["metadata"]),
                "subscription": subscription["id"],
            },
            "type": "subscription_details",
        },
        "payment_settings": {
            "default_mandate": None,
            "payment_method_options": None,
            "payment_method_types": None,
        },
        "period_end": period_end,
        "period_start": period_start,
        "post_payment_credit_notes_amount": 0,
        "pre_payment_credit_notes_amount": 0,
        "receipt_number": None,
        "rendering": None,
        "shipping_cost": None,
        "shipping_details": None,
        "starting_balance": 0,
        "statement_descriptor": None,
        "status": "open",
        "status_transitions": {
            "finalized_at": now,
            "marked_uncollectible_at": None,
            "paid_at": None,
            "voided_at": None,
        },
        "subtotal": total,
        "subtotal_excluding_tax": total,
        "test_clock": None,
        "total": total,
        "total_discount_amounts": [],
        "total_excluding_tax": total,
        "total_pretax_credit_amounts": [],
        "total_taxes": [],
        "webhooks_delivered_at": now,
    }


def invoice_payment(*, id_: str, now: int, invoice: Obj, payment_intent_id: str) -> Obj:
    return {
        "id": id_,
        "object": "invoice_payment",
        "amount_paid": None,
        "amount_requested": invoice["amount_due"],
        "created": now,
        "currency": invoice["currency"],
        "invoice": invoice["id"],
        "is_default": True,
        "livemode": False,
        "payment": {"payment_intent": payment_intent_id, "type": "payment_intent"},
        "status": "open",
        "status_transitions": {"canceled_at": None, "paid_at": None},
    }
