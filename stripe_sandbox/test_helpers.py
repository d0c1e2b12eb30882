"""`/v1/test_helpers/...` routes for what Stripe's test mode does with clocks and magic cards.

Stripe has no endpoint for most of these (it uses test clocks attached to customers, and special
card numbers that dispute or fail later), so these are sandbox-only routes under Stripe's own
`test_helpers` prefix. Call them through stripe-python's raw request, which keeps authentication,
idempotency and error handling identical to every other call:

    await client.raw_request_async("post", "/v1/test_helpers/sandbox/advance", seconds=86400 * 31)

Routes (all POST, all answer a Stripe-shaped object):
- `/v1/test_helpers/sandbox/advance` (`seconds`, or `frozen_time` as on test clocks): move the
  sandbox clock forward, running renewals, payment retries and session expiry that fall due.
- `/v1/test_helpers/customers/{id}/fail_renewals` (`fail=true|false`): renewal payments of this
  customer fail from now on (like swapping in card 4000 0000 0000 0341), or succeed again.
- `/v1/test_helpers/checkout/sessions/{id}/pay` (`card_number`, `email`, `name`, optional
  `exp`, `cvc`, `three_d_secure=complete|fail` for a 3-D Secure card): pay an open session as the
  hosted page would, without a browser. Declines answer 402 `card_error` (stripe.CardError).
- `/v1/test_helpers/charges/{id}/dispute` (`reason`, `case_type=chargeback|inquiry`): the
  cardholder disputes the charge (what card 4000 0000 0000 0259 does on Stripe), or with
  `case_type=inquiry` the issuer opens an inquiry (card 4000 0000 0000 1976).
Expiring a session and refunding use Stripe's real endpoints (`checkout.sessions.expire`,
`refunds.create`).
"""

from __future__ import annotations

from . import checkout, checkout_page, clocks, payments
from .api import Call, Obj
from .cards import Decline
from .errors import StripeError, invalid_request


def _clock(call: Call) -> Obj:
    now = call.sandbox.now()
    return {"id": "clock_sandbox", "object": "test_helpers.test_clock", "frozen_time": now, "status": "ready"}


def advance(call: Call) -> Obj:
    call.params.reject_unknown(("seconds", "frozen_time", "expand"))
    seconds = call.params.integer("seconds")
    frozen_time = call.params.integer("frozen_time")
    if (seconds is None) == (frozen_time is None):
        raise invalid_request("Pass exactly one of `seconds` or `frozen_time`.", param="seconds")
    target = frozen_time if frozen_time is not None else call.sandbox.now() + (seconds or 0)
    if target < call.sandbox.now():
        raise invalid_request("The clock can only move forward.", param="frozen_time")
    clocks.advance_to(call.sandbox, target)
    return _clock(call)


def fail_renewals(call: Call) -> Obj:
    call.params.reject_unknown(("fail", "expand"))
    fail = call.params.boolean("fail")
    call.sandbox.set_renewal_failure(call.path["id"], fail is not False)
    return call.sandbox.get("customer", call.path["id"])


def pay_session(call: Call) -> Obj:
    params = call.params
    params.reject_unknown(("card_number", "email", "name", "exp", "cvc", "three_d_secure", "expand"))
    outcome = params.enum("three_d_secure", ("complete", "fail")) or "complete"
    session = call.sandbox.get("checkout.session", call.path["id"])
    if session["status"] != "open":
        raise invalid_request(
            f"This Checkout Session is no longer active (status `{session['status']}`).", param="session"
        )
    try:
        if outcome == "fail" and checkout_page.needs_challenge(params.req_str("card_number")):
            raise checkout_page.AUTHENTICATION_FAILED
        return checkout.pay_session(
            call.sandbox,
            session,
            email=params.string("email") or session["customer_email"] or "sandbox@example.com",
            name=params.string("name") or "Sandbox Customer",
            number=params.req_str("card_number"),
            expiry=params.string("exp") or "12/40",
            cvc=params.string("cvc") or "123",
        )
    except Decline as decline:
        raise StripeError(
            402,
            decline.message,
            type_="card_error",
            code=decline.code,
            decline_code=decline.decline_code,
            param=decline.param,
        ) from None


def dispute(call: Call) -> Obj:
    call.params.reject_unknown(("reason", "case_type", "expand"))
    reason = call.params.enum(
        "reason", ("fraudulent", "general", "product_not_received", "subscription_canceled", "duplicate")
    )
    case_type = call.params.enum("case_type", ("chargeback", "inquiry"))
    charge = call.sandbox.get("charge", call.path["id"])
    return payments.open_dispute(call.sandbox, charge, reason or "fraudulent", inquiry=case_type == "inquiry")
