"""Stripe's test card numbers and what each one does.

Only the behaviours the service can meet are modelled; messages and codes are Stripe's, so error
handling written against Stripe (and a browser test reading the visible error) works unchanged.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Decline(Exception):
    code: str
    decline_code: str | None
    message: str
    param: str | None = None


# number -> (brand, funding, decline or None)
_CARDS: dict[str, tuple[str, str, Decline | None]] = {
    "4242424242424242": ("visa", "credit", None),
    "4000056655665556": ("visa", "debit", None),
    "5555555555554444": ("mastercard", "credit", None),
    "378282246310005": ("amex", "credit", None),
    "4000000000000002": (
        "visa",
        "credit",
        Decline("card_declined", "generic_decline", "Your card was declined."),
    ),
    "4000000000009995": (
        "visa",
        "credit",
        Decline("card_declined", "insufficient_funds", "Your card has insufficient funds."),
    ),
    "4000000000009987": ("visa", "credit", Decline("card_declined", "lost_card", "Your card was declined.")),
    "4000000000000069": ("visa", "credit", Decline("expired_card", None, "Your card has expired.")),
    "4000000000000127": (
        "visa",
        "credit",
        Decline("incorrect_cvc", None, "Your card's security code is incorrect."),
    ),
}

# Cards that behave in ways beyond a plain decline: (brand, funding, behaviour).
#   fail_after_attach: attaching succeeds, every charge is declined;
#   dispute: the charge succeeds, then the cardholder disputes it;
#   inquiry: the charge succeeds, then the issuer opens an inquiry (no funds withdrawn yet);
#   authenticate: an on-session payment needs 3-D Secure; once authenticated, off-session ones pass.
_SPECIAL: dict[str, tuple[str, str, str]] = {
    "4000000000000341": ("visa", "credit", "fail_after_attach"),
    "4000000000000259": ("visa", "credit", "dispute"),
    "4000000000001976": ("visa", "credit", "inquiry"),
    "4000002500003155": ("visa", "credit", "authenticate"),
}

CHALLENGE_CARDS = frozenset(
    number for number, (_brand, _funding, behaviour) in _SPECIAL.items() if behaviour == "authenticate"
)

# Stripe's test PaymentMethod ids; each use makes a new PaymentMethod from the card number.
MAGIC_PAYMENT_METHODS: dict[str, str] = {
    "pm_card_visa": "4242424242424242",
    "pm_card_visa_debit": "4000056655665556",
    "pm_card_mastercard": "5555555555554444",
    "pm_card_amex": "378282246310005",
    "pm_card_chargeDeclined": "4000000000000002",
    "pm_card_chargeDeclinedInsufficientFunds": "4000000000009995",
    "pm_card_chargeDeclinedLostCard": "4000000000009987",
    "pm_card_chargeDeclinedExpiredCard": "4000000000000069",
    "pm_card_chargeDeclinedIncorrectCvc": "4000000000000127",
    "pm_card_chargeCustomerFail": "4000000000000341",
    "pm_card_createDispute": "4000000000000259",
    "pm_card_createDisputeInquiry": "4000000000001976",
    "pm_card_authenticationRequired": "4000002500003155",
}

RENEWAL_DECLINE = Decline("card_declined", "generic_decline", "Your card was declined.")


def _luhn_ok(number: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(number)):
        digit = int(char)
        if index % 2 == 1:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def check_card(number: str, expiry: str, cvc: str, now_year: int, now_month: int) -> dict[str, object]:
    """Validate what a customer typed; the card dict on success, `Decline` otherwise."""
    digits = "".join(charge for charge in number if not charge.isspace())
    if not digits.isdigit() or not 13 <= len(digits) <= 19 or not _luhn_ok(digits):
        raise Decline("incorrect_number", None, "Your card number is incorrect.", "cardNumber")
    compact = expiry.replace(" ", "")
    month_text, _, year_text = compact.partition("/")
    if not (month_text.isdigit() and year_text.isdigit() and 1 <= int(month_text) <= 12):
        raise Decline(
            "invalid_expiry_month", None, "Your card's expiration date is incomplete.", "cardExpiry"
        )
    month, year = int(month_text), int(year_text)
    year = year + 2000 if year < 100 else year
    if (year, month) < (now_year, now_month):
        raise Decline(
            "invalid_expiry_year", None, "Your card's expiration year is in the past.", "cardExpiry"
        )
    if not (cvc.isdigit() and 3 <= len(cvc) <= 4):
        raise Decline("incomplete_cvc", None, "Your card's security code is incomplete.", "cardCvc")
    behaviour: str | None = None
    known = _CARDS.get(digits)
    if digits in _SPECIAL:
        brand, funding, behaviour = _SPECIAL[digits]
        charge_decline = Decline("card_declined", "generic_decline", "Your card was declined.")
        known = (brand, funding, charge_decline if behaviour == "fail_after_attach" else None)
    if known is None:
        raise Decline(
            "card_declined",
            "test_mode_live_card",
            "Your card was declined. Your request was in test mode, but used a non test (live) card. "
            "For a list of valid test cards, visit: https://stripe.com/docs/testing.",
            "cardNumber",
        )
    brand, funding, decline = known
    return {
        "number": digits,
        "brand": brand,
        "funding": funding,
        "last4": digits[-4:],
        "exp_month": month,
        "exp_year": year,
        "fingerprint": hashlib.sha256(digits.encode()).hexdigest()[:16],
        "decline": None if decline is None else [decline.code, decline.decline_code, decline.message],
        "behaviour": behaviour,
    }


def magic_card(magic_id: str) -> dict[str, object] | None:
    """The card behind a test PaymentMethod id such as `pm_card_visa`, or None."""
    number = MAGIC_PAYMENT_METHODS.get(magic_id)
    return None if number is None else check_card(number, "12/2040", "123", 2000, 1)


def behaviour_of(card: dict[str, object]) -> str | None:
    value = card.get("behaviour")
    return None if value is None else str(value)


def decline_of(card: dict[str, object]) -> Decline | None:
    raw = card.get("decline")
    if not raw:
        return None
    assert isinstance(raw, list)
    return Decline(str(raw[0]), None if raw[1] is None else str(raw[1]), str(raw[2]))
