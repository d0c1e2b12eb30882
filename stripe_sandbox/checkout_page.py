"""The hosted Checkout page at a session's `url`.

Field ids and names are the ones Stripe Checkout uses (`email`, `cardNumber`, `cardExpiry`,
`cardCvc`, `billingName`, one submit button), so a Playwright script written against
checkout.stripe.com fills this page unchanged. The page is plain HTML: the POST is handled
server-side, a decline re-renders the page with Stripe's message in a `role=alert` element, and a
successful payment answers 303 to `success_url`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from . import checkout
from .cards import CHALLENGE_CARDS, Decline
from .clocks import advance_to
from .pages import esc, money, page, read_form
from .sandbox import Sandbox


def _sandbox(request: Request) -> Sandbox:
    sandbox: Sandbox = request.app.state.sandbox
    advance_to(sandbox, sandbox.now())
    return sandbox


def _render(
    sandbox: Sandbox,
    session: dict[str, object],
    *,
    error: Decline | None = None,
    values: dict[str, str] | None = None,
) -> Response:
    values = values or {}
    items = checkout.line_items(sandbox, session)
    customer_email = None
    if session["customer"]:
        customer = sandbox.store.get("customer", str(session["customer"]))
        customer_email = customer.get("email") if customer else None
    email = values.get("email") or customer_email or session["customer_email"] or ""
    readonly = " readonly" if (customer_email or session["customer_email"]) else ""
    rows = "".join(
        f"<li>{esc(item['description'])} x {esc(item['quantity'] or 'usage')} — "
        f"{esc(money(item['amount_total'], item['currency']))}"
        + (f" / {esc(item['price']['recurring']['interval'])}" if item["price"]["recurring"] else "")
        + "</li>"
        for item in items
    )
    subscribe = session["mode"] == "subscription"
    cancel = (
        f'<p><a href="{esc(session["cancel_url"])}" class="BusinessLink" '
        'data-testid="business-link">← Back</a></p>'
        if session["cancel_url"]
        else ""
    )
    alert = (
        f'<div class="FieldError" role="alert" id="payment-error" data-error-code="{esc(error.code)}">'
        f"{esc(error.message)}</div>"
        if error
        else ""
    )
    body = f"""
{cancel}
<h1>{"Subscribe" if subscribe else "Pay"}</h1>
<p class="amount">{esc(money(int(str(session["amount_total"])), str(session["currency"])))}</p>
<ul>{rows}</ul>
<form method="post" novalidate>
  <label for="email">Email</label>
  <input id="email" name="email" type="email" autocomplete="email" value="{esc(email)}"{readonly}>
  <label for="cardNumber">Card information</label>
  <input id="cardNumber" name="cardNumber" inputmode="numeric" autocomplete="cc-number"
    placeholder="1234 1234 1234 1234" value="{esc(values.get("cardNumber", ""))}">
  <div class="row">
    <div><input id="cardExpiry" name="cardExpiry" autocomplete="cc-exp" placeholder="MM / YY"
      aria-label="Expiration" value="{esc(values.get("cardExpiry", ""))}"></div>
    <div><input id="cardCvc" name="cardCvc" inputmode="numeric" autocomplete="cc-csc" placeholder="CVC"
      aria-label="CVC" value="{esc(values.get("cardCvc", ""))}"></div>
  </div>
  <label for="billingName">Cardholder name</label>
  <input id="billingName" name="billingName" autocomplete="cc-name"
    value="{esc(values.get("billingName", ""))}">
  {alert}
  <button type="submit" class="SubmitButton" data-testid="hosted-payment-submit-button">
    {"Subscribe" if subscribe else "Pay"}</button>
</form>
<p><small>Stripe sandbox — test mode. Use 4242 4242 4242 4242.</small></p>
"""
    return page(
        "Checkout",
        body,
        status=402 if error else 200,
        redirect_targets=(checkout.success_redirect(session), str(session["cancel_url"] or "")),
    )


def _inactive(session: dict[str, object] | None) -> Response:
    if session is not None and session["status"] == "complete":
        return page("Checkout", "<h1>Thanks for your order</h1><p>This session is complete.</p>")
    return page(
        "Checkout",
        "<h1>Something went wrong</h1><p>This Checkout Session is no longer active.</p>",
        status=404,
    )


async def show(request: Request) -> Response:
    sandbox = _sandbox(request)
    session = sandbox.store.get("checkout.session", request.path_params["id"])
    if session is None or session["status"] != "open":
        return _inactive(session)
    return _render(sandbox, session)


async def submit(request: Request) -> Response:
    sandbox = _sandbox(request)
    session = sandbox.store.get("checkout.session", request.path_params["id"])
    if session is None or session["status"] != "open":
        return _inactive(session)
    form = await read_form(request)
    values = {
        field: form.get(field, "")
        for field in ("email", "cardNumber", "cardExpiry", "cardCvc", "billingName")
    }
    if needs_challenge(values["cardNumber"]):
        sandbox.store.priv(str(session["id"]))["pending_3ds"] = values
        return _challenge(session)
    return _pay(sandbox, session, values)


AUTHENTICATION_FAILED = Decline(
    "payment_intent_authentication_failure",
    None,
    "We are unable to authenticate your payment method. Please choose a different payment method and try "
    "again.",
)


def needs_challenge(number: str) -> bool:
    """A 3-D Secure test card: the customer is shown the challenge before paying."""
    digits = "".join(charge for charge in number if not charge.isspace())
    return digits in CHALLENGE_CARDS


def _challenge(session: dict[str, object]) -> Response:
    action = esc(f"{session['id']}/3ds")  # relative to /c/pay/{id}
    body = (
        "<h1>3D Secure 2 Test Page</h1>"
        f"<p>Authenticate a payment of <span class=amount>"
        f"{esc(money(int(str(session['amount_total'])), str(session['currency'])))}</span>.</p>"
        f'<form method="post" action="{action}"><input type=hidden name=action value=complete>'
        '<button type="submit" id="test-source-authorize-3ds" data-testid="complete-authentication">'
        "Complete</button></form>"
        f'<form method="post" action="{action}"><input type=hidden name=action value=fail>'
        '<button type="submit" class="secondary" id="test-source-fail-3ds" data-testid="fail-authentication">'
        "Fail</button></form>"
    )
    return page("Authentication", body, redirect_targets=(checkout.success_redirect(session),))


async def submit_challenge(request: Request) -> Response:
    """The customer's answer to the 3-D Secure challenge shown for this session."""
    sandbox = _sandbox(request)
    session = sandbox.store.get("checkout.session", request.path_params["id"])
    if session is None or session["status"] != "open":
        return _inactive(session)
    values = sandbox.store.priv(str(session["id"])).pop("pending_3ds", None)
    if values is None:
        return RedirectResponse(f"../{session['id']}", status_code=303)
    if (await read_form(request)).get("action") != "complete":
        return _render(
            sandbox, session, error=AUTHENTICATION_FAILED, values={**values, "cardNumber": "", "cardCvc": ""}
        )
    return _pay(sandbox, session, values)


def _pay(sandbox: Sandbox, session: dict[str, object], values: dict[str, str]) -> Response:
    try:
        checkout.pay_session(
            sandbox,
            session,
            email=values["email"].strip(),
            name=values["billingName"],
            number=values["cardNumber"],
            expiry=values["cardExpiry"],
            cvc=values["cardCvc"].strip(),
        )
    except Decline as decline:
        return _render(sandbox, session, error=decline, values={**values, "cardNumber": "", "cardCvc": ""})
    sandbox.save()
    target = checkout.success_redirect(session)
    if target is None:
        return page("Checkout", "<h1>Thanks for your order</h1><p>Your payment succeeded.</p>")
    return RedirectResponse(target, status_code=303)
