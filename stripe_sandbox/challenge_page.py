"""The 3-D Secure challenge page a `requires_action` PaymentIntent's `next_action` links to.

Like Stripe's test-mode page, it offers to complete or fail the authentication. Completing it
charges the card (and pays the invoice the PaymentIntent belongs to); either way the browser then
goes to the `return_url` with `payment_intent`, `payment_intent_client_secret` and
`redirect_status`, as Stripe redirects.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from . import billing
from .pages import esc, money, page, read_form
from .sandbox import Sandbox

Obj = dict[str, object]


def _intent(request: Request) -> tuple[Sandbox, dict[str, object] | None]:
    sandbox: Sandbox = request.app.state.sandbox
    payment_intent = sandbox.store.get("payment_intent", request.path_params["pi"])
    if payment_intent is None:
        return sandbox, None
    expected = str(sandbox.store.priv(str(payment_intent["id"])).get("challenge") or "")
    if not expected or not hmac.compare_digest(expected, request.path_params["secret"]):
        return sandbox, None
    return sandbox, payment_intent


def _gone() -> Response:
    return page("Authentication", "<h1>This authentication link is not valid</h1>", status=404)


async def show(request: Request) -> Response:
    sandbox, payment_intent = _intent(request)
    if payment_intent is None:
        return _gone()
    if payment_intent["status"] != "requires_action":
        return page(
            "Authentication",
            f"<h1>Nothing to authenticate</h1><p>Status: {esc(payment_intent['status'])}</p>",
        )
    amount = esc(money(int(str(payment_intent["amount"])), str(payment_intent["currency"])))
    body = (
        "<h1>3D Secure 2 Test Page</h1>"
        f"<p>Authenticate a payment of <span class=amount>{amount}</span>.</p>"
        f'<form method="post"><input type=hidden name=action value=complete>'
        f'<button type="submit" id="test-source-authorize-3ds" data-testid="complete-authentication">'
        "Complete</button></form>"
        '<form method="post"><input type=hidden name=action value=fail>'
        '<button type="submit" class="secondary" id="test-source-fail-3ds" data-testid="fail-authentication">'
        "Fail</button></form>"
    )
    return_url = sandbox.store.priv(str(payment_intent["id"])).get("return_url")
    return page("Authentication", body, redirect_targets=(return_url,))


async def submit(request: Request) -> Response:
    sandbox, payment_intent = _intent(request)
    if payment_intent is None:
        return _gone()
    action = (await read_form(request)).get("action")
    if payment_intent["status"] != "requires_action" or action not in ("complete", "fail"):
        return page("Authentication", "<h1>Nothing to authenticate</h1>", status=400)
    with sandbox.on_clock(
        sandbox.clock_of(str(payment_intent["customer"]) if payment_intent["customer"] else None)
    ):
        billing.authenticated(sandbox, payment_intent, action == "complete")
    sandbox.save()
    return_url = sandbox.store.priv(str(payment_intent["id"])).get("return_url")
    outcome = sandbox.store.get("payment_intent", str(payment_intent["id"])) or {}
    status = "succeeded" if outcome.get("status") == "succeeded" else "failed"
    if return_url:
        query = urlencode(
            {
                "payment_intent": payment_intent["id"],
                "payment_intent_client_secret": payment_intent["client_secret"],
                "redirect_status": status,
            }
        )
        separator = "&" if "?" in str(return_url) else "?"
        return RedirectResponse(f"{return_url}{separator}{query}", status_code=303)
    return page("Authentication", f'<h1 data-testid="authentication-result">Authentication {status}</h1>')
