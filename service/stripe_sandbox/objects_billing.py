"""Builders for subscriptions, invoices and money movement.

Shaped for the pinned API version (basil and later): billing periods live on subscription items,
not on the subscription; invoices point at their subscription through
`parent.subscription_details.subscription` and at their payments through `invoice_payment`
objects, no longer through top-level `subscription`, `charge` or `payment_intent` fields. Service
code that follows older tutorials (e.g. `invoice.subscription`) therefore fails here exactly as it
would against real Stripe.
"""

from __future__ import annotations

from typing import Any

from .objects import Obj, list_envelope, plan_from_price


def subscription_item(*, id_: str, now: int, sub_id: str, p: Obj, quantity: int, start: int, end: int) -> Obj:
    return {
        "id": id_,
        "object": "subscription_item",
        "billing_thresholds": None,
        "created": now,
        "current_period_end": end,
        "current_period_start": start,
        "discounts": [],
        "metadata": {},
        "plan": plan_from_price(p),
        "price": p,
        "quantity": quantity,
        "subscription": sub_id,
        "tax_rates": [],
    }


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


def invoice_line(*, id_: str, invoice_id: str, item: Obj, sub_id: str, start: int, end: int) -> Obj:
    p = item["price"]
    amount = p["unit_amount"] * item["quantity"]
    return {
        "id": id_,
        "object": "line_item",
        "amount": amount,
        "currency": p["currency"],
        "description": f"{item['quantity']} x {p.get('nickname') or p['product']}",
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
                "subscription": sub_id,
                "subscription_item": item["id"],
            },
            "type": "subscription_item_details",
        },
        "period": {"end": end, "start": start},
        "pretax_credit_amounts": [],
        "pricing": {
            "price_details": {"price": p["id"], "product": p["product"]},
            "type": "price_details",
            "unit_amount_decimal": p["unit_amount_decimal"],
        },
        "quantity": item["quantity"],
        "quantity_decimal": str(item["quantity"]),
        "subscription": sub_id,
        "subtotal": amount,
        "taxes": [],
    }


def invoice(
    *,
    id_: str,
    now: int,
    customer: Obj,
    sub: Obj,
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
        "currency": sub["currency"],
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
            "subscription_details": {"metadata": dict(sub["metadata"]), "subscription": sub["id"]},
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


def card_details(card: Obj) -> Obj:
    return {
        "brand": card["brand"],
        "checks": {"address_line1_check": None, "address_postal_code_check": None, "cvc_check": "pass"},
        "country": "US",
        "exp_month": card["exp_month"],
        "exp_year": card["exp_year"],
        "fingerprint": card["fingerprint"],
        "funding": card["funding"],
        "last4": card["last4"],
    }


def payment_method(
    *, id_: str, now: int, card: Obj, customer_id: str | None, email: str | None, name: str | None
) -> Obj:
    details = card_details(card)
    details.update(
        {
            "display_brand": card["brand"],
            "generated_from": None,
            "networks": {"available": [card["brand"]], "preferred": None},
            "regulated_status": "unregulated",
            "three_d_secure_usage": {"supported": True},
            "wallet": None,
        }
    )
    return {
        "id": id_,
        "object": "payment_method",
        "allow_redisplay": "limited",
        "billing_details": billing_details(email, name),
        "card": details,
        "created": now,
        "customer": customer_id,
        "customer_account": None,
        "livemode": False,
        "metadata": {},
        "type": "card",
    }


def billing_details(email: str | None, name: str | None) -> Obj:
    return {"address": None, "email": email, "name": name, "phone": None, "tax_id": None}


def payment_intent(
    *, id_: str, now: int, amount: int, currency: str, customer_id: str | None, description: str | None
) -> Obj:
    return {
        "id": id_,
        "object": "payment_intent",
        "amount": amount,
        "amount_capturable": 0,
        "amount_details": {"tip": {}},
        "amount_received": 0,
        "application": None,
        "application_fee_amount": None,
        "automatic_payment_methods": None,
        "canceled_at": None,
        "cancellation_reason": None,
        "capture_method": "automatic",
        "client_secret": f"{id_}_secret_sandbox",
        "confirmation_method": "automatic",
        "created": now,
        "currency": currency,
        "customer": customer_id,
        "customer_account": None,
        "description": description,
        "excluded_payment_method_types": None,
        "last_payment_error": None,
        "latest_charge": None,
        "livemode": False,
        "managed_payments": None,
        "metadata": {},
        "next_action": None,
        "on_behalf_of": None,
        "payment_method": None,
        "payment_method_configuration_details": None,
        "payment_method_options": {},
        "payment_method_types": ["card"],
        "processing": None,
        "receipt_email": None,
        "review": None,
        "setup_future_usage": None,
        "shipping": None,
        "source": None,
        "statement_descriptor": None,
        "statement_descriptor_suffix": None,
        "status": "requires_payment_method",
        "transfer_data": None,
        "transfer_group": None,
    }


def charge(
    *,
    id_: str,
    now: int,
    amount: int,
    currency: str,
    customer_id: str | None,
    payment_intent_id: str,
    payment_method_id: str,
    card: Obj,
    email: str | None,
    name: str | None,
    failure: tuple[str, str, str] | None,
    description: str | None,
) -> Obj:
    """A charge; `failure` is `(code, decline_code, message)` for a declined attempt.

    `refunds` is absent: since 2022-11-15 it is only returned when expanded (`expand[]=refunds`).
    """
    details: dict[str, Any] = card_details(card)
    details.update({"network": card["brand"], "three_d_secure": None, "wallet": None})
    ok = failure is None
    return {
        "id": id_,
        "object": "charge",
        "amount": amount,
        "amount_captured": amount if ok else 0,
        "amount_refunded": 0,
        "application": None,
        "application_fee": None,
        "application_fee_amount": None,
        "balance_transaction": None,
        "billing_details": billing_details(email, name),
        "calculated_statement_descriptor": "SANDBOX",
        "captured": ok,
        "created": now,
        "currency": currency,
        "customer": customer_id,
        "description": description,
        "disputed": False,
        "failure_balance_transaction": None,
        "failure_code": failure[0] if failure else None,
        "failure_message": failure[2] if failure else None,
        "fraud_details": {},
        "livemode": False,
        "metadata": {},
        "on_behalf_of": None,
        "outcome": {
            "advice_code": None,
            "network_advice_code": None,
            "network_decline_code": None,
            "network_status": "approved_by_network" if ok else "declined_by_network",
            "reason": failure[1] if failure else None,
            "risk_level": "normal",
            "seller_message": "Payment complete." if ok else "The bank did not return any further details.",
            "type": "authorized" if ok else "issuer_declined",
        },
        "paid": ok,
        "payment_intent": payment_intent_id,
        "payment_method": payment_method_id,
        "payment_method_details": {"card": details, "type": "card"},
        "receipt_email": email,
        "receipt_number": None,
        "receipt_url": None,
        "refunded": False,
        "review": None,
        "shipping": None,
        "source": None,
        "source_transfer": None,
        "statement_descriptor": None,
        "statement_descriptor_suffix": None,
        "status": "succeeded" if ok else "failed",
        "transfer_data": None,
        "transfer_group": None,
    }


def refund(*, id_: str, now: int, ch: Obj, amount: int, reason: str | None, metadata: dict[str, str]) -> Obj:
    return {
        "id": id_,
        "object": "refund",
        "amount": amount,
        "balance_transaction": None,
        "charge": ch["id"],
        "created": now,
        "currency": ch["currency"],
        "customer": ch["customer"],
        "customer_account": None,
        "destination_details": {"card": {"type": "refund"}, "type": "card"},
        "metadata": metadata,
        "payment_intent": ch["payment_intent"],
        "payment_method": ch["payment_method"],
        "reason": reason,
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": "succeeded",
        "transfer_reversal": None,
    }


def dispute(*, id_: str, now: int, ch: Obj, reason: str, amount: int) -> Obj:
    evidence_keys = [
        "access_activity_log",
        "billing_address",
        "cancellation_policy",
        "cancellation_policy_disclosure",
        "cancellation_rebuttal",
        "customer_communication",
        "customer_email_address",
        "customer_name",
        "customer_purchase_ip",
        "customer_signature",
        "duplicate_charge_documentation",
        "duplicate_charge_explanation",
        "duplicate_charge_id",
        "product_description",
        "receipt",
        "refund_policy",
        "refund_policy_disclosure",
        "refund_refusal_explanation",
        "service_date",
        "service_documentation",
        "shipping_address",
        "shipping_carrier",
        "shipping_date",
        "shipping_documentation",
        "shipping_tracking_number",
        "uncategorized_file",
        "uncategorized_text",
    ]
    evidence: dict[str, Any] = dict.fromkeys(evidence_keys)
    evidence["enhanced_evidence"] = {}
    return {
        "id": id_,
        "object": "dispute",
        "amount": amount,
        "balance_transactions": [],
        "charge": ch["id"],
        "created": now,
        "currency": ch["currency"],
        "enhanced_eligibility_types": [],
        "evidence": evidence,
        "evidence_details": {
            "due_by": now + 7 * 86400,
            "enhanced_eligibility": {},
            "has_evidence": False,
            "past_due": False,
            "submission_count": 0,
        },
        "is_charge_refundable": False,
        "livemode": False,
        "metadata": {},
        "payment_intent": ch["payment_intent"],
        "payment_method_details": {
            "card": {"brand": "visa", "case_type": "chargeback", "network_reason_code": "10.4"},
            "type": "card",
        },
        "reason": reason,
        "status": "needs_response",
    }
