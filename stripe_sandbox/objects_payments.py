"""Builders for money movement: payment methods, payment intents, charges, refunds, disputes.

Test cards are stored as `card` dicts (see `cards.check_card`); only the non-secret parts (brand,
last4, expiry, fingerprint) ever appear in API objects.
"""

from __future__ import annotations

from typing import Any

from .objects import Obj


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


def refund(
    *, id_: str, now: int, charge: Obj, amount: int, reason: str | None, metadata: dict[str, str]
) -> Obj:
    return {
        "id": id_,
        "object": "refund",
        "amount": amount,
        "balance_transaction": None,
        "charge": charge["id"],
        "created": now,
        "currency": charge["currency"],
        "customer": charge["customer"],
        "customer_account": None,
        "destination_details": {"card": {"type": "refund"}, "type": "card"},
        "metadata": metadata,
        "payment_intent": charge["payment_intent"],
        "payment_method": charge["payment_method"],
        "reason": reason,
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": "succeeded",
        "transfer_reversal": None,
    }


def dispute(*, id_: str, now: int, charge: Obj, reason: str, amount: int, inquiry: bool = False) -> Obj:
    """A chargeback (funds withdrawn, the charge no longer refundable) or, with `inquiry`, an issuer's
    inquiry before any chargeback: nothing withdrawn yet and the charge still refundable."""
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
        "charge": charge["id"],
        "created": now,
        "currency": charge["currency"],
        "enhanced_eligibility_types": [],
        "evidence": evidence,
        "evidence_details": {
            "due_by": now + 7 * 86400,
            "enhanced_eligibility": {},
            "has_evidence": False,
            "past_due": False,
            "submission_count": 0,
        },
        "is_charge_refundable": inquiry,
        "livemode": False,
        "metadata": {},
        "payment_intent": charge["payment_intent"],
        "payment_method_details": {
            "card": {
                "brand": "visa",
                "case_type": "inquiry" if inquiry else "chargeback",
                "network_reason_code": "10.4",
            },
            "type": "card",
        },
        "reason": reason,
        "status": "warning_needs_response" if inquiry else "needs_response",
    }


STRIPE_FEE_PERCENT_BPS = 290  # 2.9 % ...
STRIPE_FEE_FIXED = 30  # ... + 30 minor units, Stripe's standard US card pricing


def card_fee(amount: int) -> int:
    return (amount * STRIPE_FEE_PERCENT_BPS + 5000) // 10000 + STRIPE_FEE_FIXED


def balance_transaction(
    *,
    id_: str,
    now: int,
    amount: int,
    currency: str,
    fee: int,
    source: str,
    kind: str,
    description: str | None,
) -> Obj:
    return {
        "id": id_,
        "object": "balance_transaction",
        "amount": amount,
        "available_on": now + 2 * 86400,
        "balance_type": "payments",
        "created": now,
        "currency": currency,
        "description": description,
        "exchange_rate": None,
        "fee": fee,
        "fee_details": (
            [
                {
                    "amount": fee,
                    "application": None,
                    "currency": currency,
                    "description": "Stripe processing fees",
                    "type": "stripe_fee",
                }
            ]
            if fee
            else []
        ),
        "net": amount - fee,
        "reporting_category": kind,
        "source": source,
        "status": "pending",
        "type": kind,
    }
