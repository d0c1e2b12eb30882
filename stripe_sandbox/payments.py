"""Charging cards, refunds and disputes, with the events Stripe emits for each."""

from __future__ import annotations

from typing import Any

from . import objects_payments as objects_payments
from .cards import Decline, behaviour_of, decline_of, magic_card
from .errors import StripeError, invalid_request, resource_missing
from .ids import new_id, new_secret
from .sandbox import Sandbox

Obj = dict[str, Any]


def create_payment_method(
    sandbox: Sandbox, card: Obj, customer_id: str | None, email: str | None, name: str | None
) -> Obj:
    payment_method = objects_payments.payment_method(
        id_=new_id("pm"), now=sandbox.now(), card=card, customer_id=customer_id, email=email, name=name
    )
    sandbox.store.put(payment_method)
    sandbox.store.priv(payment_method["id"])["card"] = card
    return payment_method


def resolve_payment_method(
    sandbox: Sandbox, payment_method_id: str, param: str, cache: dict[str, Obj]
) -> Obj:
    """A PaymentMethod by id; a test id (`pm_card_visa`) makes a new one, once per request."""
    if payment_method_id in cache:
        return cache[payment_method_id]
    card = magic_card(payment_method_id)
    if card is not None:
        payment_method = create_payment_method(sandbox, card, None, None, None)
        cache[payment_method_id] = payment_method
        return payment_method
    found = sandbox.store.get("payment_method", payment_method_id)
    if found is None:
        raise resource_missing("payment_method", payment_method_id, param=param)
    return found


def attach(sandbox: Sandbox, payment_method: Obj, customer_id: str) -> Obj:
    """Attach to a customer, as Stripe does: a card that declines cannot be attached."""
    if payment_method["customer"] == customer_id:
        return payment_method
    if payment_method["customer"] is not None:
        raise invalid_request(
            "The payment method you provided has already been attached to a customer.", param="payment_method"
        )
    check_attachable(sandbox, payment_method)
    payment_method["customer"] = customer_id
    sandbox.emit("payment_method.attached", payment_method)
    return payment_method


def check_attachable(sandbox: Sandbox, payment_method: Obj) -> None:
    card = sandbox.store.priv(payment_method["id"])["card"]
    decline = decline_of(card)
    if decline is not None and behaviour_of(card) != "fail_after_attach":
        raise StripeError(
            402,
            decline.message,
            type_="card_error",
            code=decline.code,
            decline_code=decline.decline_code,
            param="payment_method",
        )


def detach(sandbox: Sandbox, payment_method: Obj) -> Obj:
    if payment_method["customer"] is None:
        raise invalid_request(
            f"The payment method {payment_method['id']} is not attached to a customer.",
            param="payment_method",
        )
    previous = {"customer": payment_method["customer"]}
    payment_method["customer"] = None
    sandbox.emit("payment_method.detached", payment_method, previous)
    return payment_method


def record_balance(
    sandbox: Sandbox, *, amount: int, currency: str, fee: int, source: str, kind: str, description: str | None
) -> str:
    """A balance transaction for money that moved; returns its id."""
    transaction = objects_payments.balance_transaction(
        id_=new_id("txn"),
        now=sandbox.now(),
        amount=amount,
        currency=currency,
        fee=fee,
        source=source,
        kind=kind,
        description=description,
    )
    sandbox.store.put(transaction)
    return str(transaction["id"])


def page_url(sandbox: Sandbox, kind: str, object_id: str) -> str:
    """A hosted page for one object (receipt, invoice), behind an unguessable secret."""
    secret = new_secret()
    sandbox.store.priv(object_id)[f"{kind}_secret"] = secret
    return f"{sandbox.config.public_base_url.rstrip('/')}/{kind}/{object_id}/{secret}"


def new_payment_intent(
    sandbox: Sandbox,
    *,
    amount: int,
    currency: str,
    customer_id: str | None,
    payment_method: Obj | None,
    description: str | None,
    metadata: dict[str, str] | None = None,
) -> Obj:
    """A PaymentIntent not yet confirmed; `payment_intent.created` carries it as it is now."""
    payment_intent = objects_payments.payment_intent(
        id_=new_id("pi"),
        now=sandbox.now(),
        amount=amount,
        currency=currency,
        customer_id=customer_id,
        description=description,
    )
    payment_intent["metadata"] = dict(metadata or {})
    if payment_method is not None:
        payment_intent.update(payment_method=payment_method["id"], status="requires_confirmation")
    sandbox.store.put(payment_intent)
    sandbox.emit("payment_intent.created", payment_intent)
    return payment_intent


def needs_authentication(sandbox: Sandbox, payment_method: Obj) -> bool:
    """A 3-D Secure card that was never authenticated by its holder."""
    private = sandbox.store.priv(payment_method["id"])
    return behaviour_of(private["card"]) == "authenticate" and not private.get("authenticated")


def request_authentication(
    sandbox: Sandbox, payment_intent: Obj, payment_method: Obj, return_url: str | None
) -> Obj:
    """Leave `pi` in `requires_action`, with a link to the sandbox's 3-D Secure challenge page."""
    secret = new_secret()
    sandbox.store.priv(payment_intent["id"]).update(challenge=secret, return_url=return_url)
    url = f"{sandbox.config.public_base_url.rstrip('/')}/3ds/{payment_intent['id']}/{secret}"
    payment_intent.update(
        payment_method=payment_method["id"],
        status="requires_action",
        next_action={"type": "redirect_to_url", "redirect_to_url": {"url": url, "return_url": return_url}},
    )
    sandbox.emit("payment_intent.requires_action", payment_intent)
    return payment_intent


def confirm(sandbox: Sandbox, payment_intent: Obj, payment_method: Obj, decline: Decline | None) -> Obj:
    """One charge attempt for `pi` with `pm`; returns the charge and emits what Stripe emits."""
    now = sandbox.now()
    card = sandbox.store.priv(payment_method["id"])["card"]
    amount = int(payment_intent["amount"])
    failure = (
        None if decline is None else (decline.code, decline.decline_code or decline.code, decline.message)
    )
    charge = objects_payments.charge(
        id_=new_id("ch"),
        now=now,
        amount=amount,
        currency=payment_intent["currency"],
        customer_id=payment_intent["customer"],
        payment_intent_id=payment_intent["id"],
        payment_method_id=payment_method["id"],
        card=card,
        email=payment_method["billing_details"]["email"],
        name=payment_method["billing_details"]["name"],
        failure=failure,
        description=payment_intent["description"],
    )
    payment_intent.update(latest_charge=charge["id"], payment_method=payment_method["id"], next_action=None)
    if decline is None:
        payment_intent.update(status="succeeded", amount_received=amount, last_payment_error=None)
    else:
        payment_intent["last_payment_error"] = {
            "type": "card_error",
            "code": decline.code,
            "decline_code": decline.decline_code,
            "message": decline.message,
            "charge": charge["id"],
            "payment_method": sandbox.snapshot(payment_method),
        }
        payment_intent.update(payment_method=None, status="requires_payment_method")
    if decline is None:
        charge["balance_transaction"] = record_balance(
            sandbox,
            amount=amount,
            currency=payment_intent["currency"],
            fee=objects_payments.card_fee(amount),
            source=charge["id"],
            kind="charge",
            description=payment_intent["description"],
        )
        charge["receipt_url"] = page_url(sandbox, "receipts", charge["id"])
    sandbox.store.put(charge)
    if decline is None:
        sandbox.emit("charge.succeeded", charge)
        sandbox.emit("payment_intent.succeeded", payment_intent)
        if behaviour_of(card) in ("dispute", "inquiry"):
            open_dispute(sandbox, charge, "fraudulent", inquiry=behaviour_of(card) == "inquiry")
    else:
        sandbox.emit("charge.failed", charge)
        sandbox.emit("payment_intent.payment_failed", payment_intent)
    return charge


def charge_card(
    sandbox: Sandbox,
    *,
    amount: int,
    currency: str,
    customer_id: str | None,
    payment_method: Obj,
    description: str | None,
    decline: Decline | None,
    metadata: dict[str, str] | None = None,
) -> tuple[Obj, Obj]:
    """A PaymentIntent with one charge attempt; emits the charge and payment_intent events."""
    payment_intent = new_payment_intent(
        sandbox,
        amount=amount,
        currency=currency,
        customer_id=customer_id,
        payment_method=payment_method,
        description=description,
        metadata=metadata,
    )
    return payment_intent, confirm(sandbox, payment_intent, payment_method, decline)


def refund_charge(
    sandbox: Sandbox, charge: Obj, amount: int | None, reason: str | None, metadata: dict[str, str]
) -> Obj:
    remaining = charge["amount"] - charge["amount_refunded"]
    if charge["status"] != "succeeded":
        raise invalid_request(
            f"Charge {charge['id']} has not succeeded and cannot be refunded.", param="charge"
        )
    if remaining <= 0:
        raise invalid_request(
            f"Charge {charge['id']} has already been refunded.",
            code="charge_already_refunded",
            param="charge",
        )
    if charge["disputed"] and not all(
        dispute["is_charge_refundable"]
        for dispute in sandbox.store.newest_first("dispute")
        if dispute["charge"] == charge["id"]
    ):
        raise invalid_request(
            f"Charge {charge['id']} has been charged back; cannot issue a refund.",
            code="charge_disputed",
            param="charge",
        )
    amount = remaining if amount is None else amount
    if amount <= 0:
        raise invalid_request("Invalid positive integer", param="amount", code="parameter_invalid_integer")
    if amount > remaining:
        raise invalid_request(
            f"Refund amount ({amount}) is greater than unrefunded amount on charge ({remaining})",
            param="amount",
            code="amount_too_large",
        )
    refund = objects_payments.refund(
        id_=new_id("re"), now=sandbox.now(), charge=charge, amount=amount, reason=reason, metadata=metadata
    )
    refund["balance_transaction"] = record_balance(
        sandbox,
        amount=-amount,
        currency=charge["currency"],
        fee=0,
        source=refund["id"],
        kind="refund",
        description="REFUND FOR CHARGE",
    )
    sandbox.store.put(refund)
    before = sandbox.snapshot(charge)
    charge["amount_refunded"] += amount
    charge["refunded"] = charge["amount_refunded"] == charge["amount"]
    sandbox.emit("refund.created", refund)
    sandbox.emit("charge.refunded", charge, _charge_previous(before, charge))
    return refund


def _charge_previous(before: Obj, after: Obj) -> Obj:
    return {field: before[field] for field in before if before[field] != after.get(field)}


def open_dispute(sandbox: Sandbox, charge: Obj, reason: str, *, inquiry: bool = False) -> Obj:
    """The cardholder disputes the charge: a chargeback withdraws the amount and a fee at once; an
    inquiry (`inquiry`) withdraws nothing until it escalates (`escalate_inquiry_evidence`)."""
    if charge["status"] != "succeeded":
        raise invalid_request(
            f"Charge {charge['id']} has not succeeded and cannot be disputed.", param="charge"
        )
    if charge["disputed"]:
        raise invalid_request(f"Charge {charge['id']} is already disputed.", param="charge")
    dispute = objects_payments.dispute(
        id_=new_id("dp"),
        now=sandbox.now(),
        charge=charge,
        reason=reason,
        amount=charge["amount"] - charge["amount_refunded"],
        inquiry=inquiry,
    )
    if not inquiry:
        _withdraw(sandbox, dispute)
    sandbox.store.put(dispute)
    charge["disputed"] = True
    sandbox.emit("charge.dispute.created", dispute)
    if not inquiry:
        sandbox.emit("charge.dispute.funds_withdrawn", dispute)
    return dispute


def _withdraw(sandbox: Sandbox, dispute: Obj) -> None:
    withdrawn = record_balance(
        sandbox,
        amount=-dispute["amount"],
        currency=dispute["currency"],
        fee=DISPUTE_FEE,
        source=dispute["id"],
        kind="adjustment",
        description=f"Chargeback withdrawal for {dispute['charge']}",
    )
    dispute["balance_transactions"].append(sandbox.snapshot(sandbox.get("balance_transaction", withdrawn)))
    dispute["is_charge_refundable"] = False


DISPUTE_FEE = 1500
DISPUTE_EVIDENCE = ("uncategorized_text", "product_description")
INQUIRY_OPEN = ("warning_needs_response", "warning_under_review")
DECIDED = ("won", "lost", "warning_closed")


def update_dispute(sandbox: Sandbox, dispute: Obj, evidence: dict[str, str], submit: bool) -> Obj:
    """Evidence, and its submission (Stripe submits unless told `submit=false`). In test mode the
    uncategorized text decides at once, as on Stripe: `winning_evidence` wins a chargeback and
    `losing_evidence` loses it, either closes an inquiry (`warning_closed`), and
    `escalate_inquiry_evidence` turns an inquiry into a chargeback, withdrawing the funds."""
    if dispute["status"] not in ("needs_response", "warning_needs_response"):
        raise invalid_request(f"This dispute is {dispute['status']} and can no longer be updated.")
    inquiry = dispute["status"] in INQUIRY_OPEN
    before = sandbox.snapshot(dispute)
    dispute["evidence"].update(evidence)
    dispute["evidence_details"]["has_evidence"] = any(
        dispute["evidence"].get(field) for field in DISPUTE_EVIDENCE
    )
    text = dispute["evidence"].get("uncategorized_text")
    if inquiry and text == "escalate_inquiry_evidence":
        dispute["status"] = "needs_response"
        dispute["payment_method_details"]["card"]["case_type"] = "chargeback"
        _withdraw(sandbox, dispute)
        sandbox.emit_updated("charge.dispute.updated", before, dispute)
        sandbox.emit("charge.dispute.funds_withdrawn", dispute)
        return dispute
    if submit:
        dispute["evidence_details"]["submission_count"] += 1
        dispute["status"] = "warning_under_review" if inquiry else "under_review"
    sandbox.emit_updated("charge.dispute.updated", before, dispute)
    if submit and text in ("winning_evidence", "losing_evidence"):
        decided = "warning_closed" if inquiry else "won" if text == "winning_evidence" else "lost"
        close_dispute(sandbox, dispute, decided)
    return dispute


def close_dispute(sandbox: Sandbox, dispute: Obj, status: str | None = None) -> Obj:
    """Decide the dispute (by default as the merchant accepting it: a chargeback lost, an inquiry
    closed). As on Stripe the charge stays `disputed` whatever the outcome, and a won chargeback
    gives the funds back (`charge.dispute.funds_reinstated`) and the charge becomes refundable."""
    if dispute["status"] in DECIDED:
        raise invalid_request(f"This dispute is already closed ({dispute['status']}).")
    if status is None:
        status = "warning_closed" if dispute["status"] in INQUIRY_OPEN else "lost"
    dispute["status"] = status
    if status == "won":
        reinstated = record_balance(
            sandbox,
            amount=dispute["amount"],
            currency=dispute["currency"],
            fee=-DISPUTE_FEE,
            source=dispute["id"],
            kind="adjustment",
            description=f"Chargeback reversal for {dispute['charge']}",
        )
        dispute["balance_transactions"].append(
            sandbox.snapshot(sandbox.get("balance_transaction", reinstated))
        )
        dispute["is_charge_refundable"] = True
    sandbox.emit("charge.dispute.closed", dispute)
    if status == "won":
        sandbox.emit("charge.dispute.funds_reinstated", dispute)
    return dispute
