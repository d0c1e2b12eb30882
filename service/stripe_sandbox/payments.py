"""Charging cards, refunds and disputes, with the events Stripe emits for each."""

from __future__ import annotations

from typing import Any

from . import objects_payments as op
from .cards import Decline, behaviour_of, decline_of, magic_card
from .errors import StripeError, invalid_request, resource_missing
from .ids import new_id
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
    now = sb.now()
    card = sb.store.priv(pm["id"])["card"]
    pi = op.payment_intent(
        id_=new_id("pi"),
        now=now,
        amount=amount,
        currency=currency,
        customer_id=customer_id,
        description=description,
    )
    pi["metadata"] = dict(metadata or {})
    pi["payment_method"] = pm["id"]
    failure = (
        None if decline is None else (decline.code, decline.decline_code or decline.code, decline.message)
    )
    ch = op.charge(
        id_=new_id("ch"),
        now=now,
        amount=amount,
        currency=currency,
        customer_id=customer_id,
        payment_intent_id=pi["id"],
        payment_method_id=pm["id"],
        card=card,
        email=pm["billing_details"]["email"],
        name=pm["billing_details"]["name"],
        failure=failure,
        description=description,
    )
    pi["latest_charge"] = ch["id"]
    if decline is None:
        pi.update(status="succeeded", amount_received=amount)
    else:
        pi["last_payment_error"] = {
            "type": "card_error",
            "code": decline.code,
            "decline_code": decline.decline_code,
            "message": decline.message,
            "charge": ch["id"],
            "payment_method": sb.snapshot(pm),
        }
        pi["payment_method"] = None
    sb.store.put(pi)
    sb.store.put(ch)
    sb.emit("payment_intent.created", pi)
    if decline is None:
        sb.emit("charge.succeeded", ch)
        sb.emit("payment_intent.succeeded", pi)
        if behaviour_of(card) == "dispute":
            open_dispute(sb, ch, "fraudulent")
    else:
        sb.emit("charge.failed", ch)
        sb.emit("payment_intent.payment_failed", pi)
    return pi, ch


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
    sb.store.put(dispute)
    ch["disputed"] = True
    sb.emit("charge.dispute.created", dispute)
    return dispute
