"""Charging cards, refunds and disputes, with the events Stripe emits for each."""

from __future__ import annotations

from typing import Any

from . import objects_payments as op
from .cards import Decline, behaviour_of, decline_of, magic_card
from .errors import StripeError, invalid_request, resource_missing
from .ids import new_id, new_secret
from .sandbox import Sandbox

Obj = dict[str, Any]


def create_payment_method(
    sb: Sandbox, card: Obj, customer_id: str | None, email: str | None, name: str | None
) -> Obj:
    pm = op.payment_method(
        id_=new_id("pm"), now=sb.now(), card=card, customer_id=customer_id, email=email, name=name
    )
    sb.store.put(pm)
    sb.store.priv(pm["id"])["card"] = card
    return pm


def resolve_payment_method(sb: Sandbox, pm_id: str, param: str, cache: dict[str, Obj]) -> Obj:
    """A PaymentMethod by id; a test id (`pm_card_visa`) makes a new one, once per request."""
    if pm_id in cache:
        return cache[pm_id]
    card = magic_card(pm_id)
    if card is not None:
        pm = create_payment_method(sb, card, None, None, None)
        cache[pm_id] = pm
        return pm
    found = sb.store.get("payment_method", pm_id)
    if found is None:
        raise resource_missing("payment_method", pm_id, param=param)
    return found


def attach(sb: Sandbox, pm: Obj, customer_id: str) -> Obj:
    """Attach to a customer, as Stripe does: a card that declines cannot be attached."""
    if pm["customer"] == customer_id:
        return pm
    if pm["customer"] is not None:
        raise invalid_request(
            "The payment method you provided has already been attached to a customer.", param="payment_method"
        )
    check_attachable(sb, pm)
    pm["customer"] = customer_id
    sb.emit("payment_method.attached", pm)
    return pm


def check_attachable(sb: Sandbox, pm: Obj) -> None:
    card = sb.store.priv(pm["id"])["card"]
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


def detach(sb: Sandbox, pm: Obj) -> Obj:
    if pm["customer"] is None:
        raise invalid_request(
            f"The payment method {pm['id']} is not attached to a customer.", param="payment_method"
        )
    previous = {"customer": pm["customer"]}
    pm["customer"] = None
    sb.emit("payment_method.detached", pm, previous)
    return pm


def record_balance(
    sb: Sandbox, *, amount: int, currency: str, fee: int, source: str, kind: str, description: str | None
) -> str:
    """A balance transaction for money that moved; returns its id."""
    txn = op.balance_transaction(
        id_=new_id("txn"),
        now=sb.now(),
        amount=amount,
        currency=currency,
        fee=fee,
        source=source,
        kind=kind,
        description=description,
    )
    sb.store.put(txn)
    return str(txn["id"])


def page_url(sb: Sandbox, kind: str, object_id: str) -> str:
    """A hosted page for one object (receipt, invoice), behind an unguessable secret."""
    secret = new_secret()
    sb.store.priv(object_id)[f"{kind}_secret"] = secret
    return f"{sb.config.public_base_url.rstrip('/')}/{kind}/{object_id}/{secret}"


def new_payment_intent(
    sb: Sandbox,
    *,
    amount: int,
    currency: str,
    customer_id: str | None,
    pm: Obj | None,
    description: str | None,
    metadata: dict[str, str] | None = None,
) -> Obj:
    """A PaymentIntent not yet confirmed; `payment_intent.created` carries it as it is now."""
    pi = op.payment_intent(
        id_=new_id("pi"),
        now=sb.now(),
        amount=amount,
        currency=currency,
        customer_id=customer_id,
        description=description,
    )
    pi["metadata"] = dict(metadata or {})
    if pm is not None:
        pi.update(payment_method=pm["id"], status="requires_confirmation")
    sb.store.put(pi)
    sb.emit("payment_intent.created", pi)
    return pi


def needs_authentication(sb: Sandbox, pm: Obj) -> bool:
    """A 3-D Secure card that was never authenticated by its holder."""
    private = sb.store.priv(pm["id"])
    return behaviour_of(private["card"]) == "authenticate" and not private.get("authenticated")


def request_authentication(sb: Sandbox, pi: Obj, pm: Obj, return_url: str | None) -> Obj:
    """Leave `pi` in `requires_action`, with a link to the sandbox's 3-D Secure challenge page."""
    secret = new_secret()
    sb.store.priv(pi["id"]).update(challenge=secret, return_url=return_url)
    url = f"{sb.config.public_base_url.rstrip('/')}/3ds/{pi['id']}/{secret}"
    pi.update(
        payment_method=pm["id"],
        status="requires_action",
        next_action={"type": "redirect_to_url", "redirect_to_url": {"url": url, "return_url": return_url}},
    )
    sb.emit("payment_intent.requires_action", pi)
    return pi


def confirm(sb: Sandbox, pi: Obj, pm: Obj, decline: Decline | None) -> Obj:
    """One charge attempt for `pi` with `pm`; returns the charge and emits what Stripe emits."""
    now = sb.now()
    card = sb.store.priv(pm["id"])["card"]
    amount = int(pi["amount"])
    failure = (
        None if decline is None else (decline.code, decline.decline_code or decline.code, decline.message)
    )
    ch = op.charge(
        id_=new_id("ch"),
        now=now,
        amount=amount,
        currency=pi["currency"],
        customer_id=pi["customer"],
        payment_intent_id=pi["id"],
        payment_method_id=pm["id"],
        card=card,
        email=pm["billing_details"]["email"],
        name=pm["billing_details"]["name"],
        failure=failure,
        description=pi["description"],
    )
    pi.update(latest_charge=ch["id"], payment_method=pm["id"], next_action=None)
    if decline is None:
        pi.update(status="succeeded", amount_received=amount, last_payment_error=None)
    else:
        pi["last_payment_error"] = {
            "type": "card_error",
            "code": decline.code,
            "decline_code": decline.decline_code,
            "message": decline.message,
            "charge": ch["id"],
            "payment_method": sb.snapshot(pm),
        }
        pi.update(payment_method=None, status="requires_payment_method")
    if decline is None:
        ch["balance_transaction"] = record_balance(
            sb,
            amount=amount,
            currency=pi["currency"],
            fee=op.card_fee(amount),
            source=ch["id"],
            kind="charge",
            description=pi["description"],
        )
        ch["receipt_url"] = page_url(sb, "receipts", ch["id"])
    sb.store.put(ch)
    if decline is None:
        sb.emit("charge.succeeded", ch)
        sb.emit("payment_intent.succeeded", pi)
        if behaviour_of(card) == "dispute":
            open_dispute(sb, ch, "fraudulent")
    else:
        sb.emit("charge.failed", ch)
        sb.emit("payment_intent.payment_failed", pi)
    return ch


def charge_card(
    sb: Sandbox,
    *,
    amount: int,
    currency: str,
    customer_id: str | None,
    pm: Obj,
    description: str | None,
    decline: Decline | None,
    metadata: dict[str, str] | None = None,
) -> tuple[Obj, Obj]:
    """A PaymentIntent with one charge attempt; emits the charge and payment_intent events."""
    pi = new_payment_intent(
        sb,
        amount=amount,
        currency=currency,
        customer_id=customer_id,
        pm=pm,
        description=description,
        metadata=metadata,
    )
    return pi, confirm(sb, pi, pm, decline)


def refund_charge(
    sb: Sandbox, ch: Obj, amount: int | None, reason: str | None, metadata: dict[str, str]
) -> Obj:
    remaining = ch["amount"] - ch["amount_refunded"]
    if ch["status"] != "succeeded":
        raise invalid_request(f"Charge {ch['id']} has not succeeded and cannot be refunded.", param="charge")
    if remaining <= 0:
        raise invalid_request(
            f"Charge {ch['id']} has already been refunded.", code="charge_already_refunded", param="charge"
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
    refund = op.refund(id_=new_id("re"), now=sb.now(), ch=ch, amount=amount, reason=reason, metadata=metadata)
    refund["balance_transaction"] = record_balance(
        sb,
        amount=-amount,
        currency=ch["currency"],
        fee=0,
        source=refund["id"],
        kind="refund",
        description="REFUND FOR CHARGE",
    )
    sb.store.put(refund)
    before = sb.snapshot(ch)
    ch["amount_refunded"] += amount
    ch["refunded"] = ch["amount_refunded"] == ch["amount"]
    sb.emit("refund.created", refund)
    sb.emit("charge.refunded", ch, _charge_previous(before, ch))
    return refund


def _charge_previous(before: Obj, after: Obj) -> Obj:
    return {k: before[k] for k in before if before[k] != after.get(k)}


def open_dispute(sb: Sandbox, ch: Obj, reason: str) -> Obj:
    if ch["status"] != "succeeded":
        raise invalid_request(f"Charge {ch['id']} has not succeeded and cannot be disputed.", param="charge")
    if ch["disputed"]:
        raise invalid_request(f"Charge {ch['id']} is already disputed.", param="charge")
    dispute = op.dispute(
        id_=new_id("dp"), now=sb.now(), ch=ch, reason=reason, amount=ch["amount"] - ch["amount_refunded"]
    )
    withdrawn = record_balance(
        sb,
        amount=-dispute["amount"],
        currency=ch["currency"],
        fee=1500,
        source=dispute["id"],
        kind="adjustment",
        description=f"Chargeback withdrawal for {ch['id']}",
    )
    dispute["balance_transactions"] = [sb.snapshot(sb.get("balance_transaction", withdrawn))]
    sb.store.put(dispute)
    ch["disputed"] = True
    sb.emit("charge.dispute.created", dispute)
    return dispute


DISPUTE_EVIDENCE = ("uncategorized_text", "product_description")


def update_dispute(sb: Sandbox, dispute: Obj, evidence: dict[str, str], submit: bool) -> Obj:
    """Evidence, and its submission; in test mode `winning_evidence` / `losing_evidence` as the
    uncategorized text decide the dispute at once, as on Stripe."""
    if dispute["status"] not in ("needs_response", "warning_needs_response"):
        raise invalid_request(f"This dispute is {dispute['status']} and can no longer be updated.")
    before = sb.snapshot(dispute)
    dispute["evidence"].update(evidence)
    dispute["evidence_details"]["has_evidence"] = any(dispute["evidence"].get(k) for k in DISPUTE_EVIDENCE)
    if submit:
        dispute["evidence_details"]["submission_count"] += 1
        dispute["status"] = "under_review"
    sb.emit_updated("charge.dispute.updated", before, dispute)
    text = dispute["evidence"].get("uncategorized_text")
    if submit and text in ("winning_evidence", "losing_evidence"):
        close_dispute(sb, dispute, "won" if text == "winning_evidence" else "lost")
    return dispute


def close_dispute(sb: Sandbox, dispute: Obj, status: str = "lost") -> Obj:
    if dispute["status"] in ("won", "lost"):
        raise invalid_request(f"This dispute is already closed ({dispute['status']}).")
    dispute["status"] = status
    if status == "won":
        reinstated = record_balance(
            sb,
            amount=dispute["amount"],
            currency=dispute["currency"],
            fee=-1500,
            source=dispute["id"],
            kind="adjustment",
            description=f"Chargeback reversal for {dispute['charge']}",
        )
        dispute["balance_transactions"].append(sb.snapshot(sb.get("balance_transaction", reinstated)))
    sb.emit("charge.dispute.closed", dispute)
    return dispute
