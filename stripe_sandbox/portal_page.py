"""The billing portal page a portal session's `url` opens.

What Stripe's portal offers a customer: see each subscription, cancel it at period end and resume
it before then, switch to another price of the same billing interval (prorated), and replace the
card invoices are charged to. A session created with `flow_data` opens straight on that flow
(`subscription_cancel`, `subscription_update`, `payment_method_update`) and, when the flow says
`after_completion.type=redirect`, sends the browser to its `return_url` once done. Changes go
through the same code as the API, so the service receives the same events as from Stripe's portal.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from . import billing, clocks, payments
from .cards import Decline, behaviour_of, check_card, decline_of
from .objects import plan_from_price
from .pages import esc, money, page, read_form
from .sandbox import Sandbox

Obj = dict[str, Any]


def _session(request: Request) -> tuple[Sandbox, Obj | None]:
    sandbox: Sandbox = request.app.state.sandbox
    clocks.advance_to(sandbox, sandbox.now())
    session_id = sandbox.store.priv("portal_secrets").get(request.path_params["secret"])
    return sandbox, (sandbox.store.get("billing_portal.session", session_id) if session_id else None)


def _date(timestamp: int) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%B %-d, %Y")


def _missing() -> Response:
    return page(
        "Billing", "<h1>This link has expired</h1><p>Please return to the site and try again.</p>", status=404
    )


def _home(request: Request) -> str:
    return f"{request.url.path.split('/p/session/')[0]}/p/session/{request.path_params['secret']}"


def _targets(session: Obj) -> tuple[str, ...]:
    flow = session.get("flow") or {}
    redirect = (flow.get("after_completion") or {}).get("redirect") or {}
    return (str(session["return_url"] or ""), str(redirect.get("return_url") or ""))


def _done(request: Request, session: Obj) -> Response:
    """Where the browser goes after a change: the flow's redirect, else the portal's home page."""
    flow = session.get("flow") or {}
    after = flow.get("after_completion") or {}
    if after.get("type") == "redirect":
        return RedirectResponse(after["redirect"]["return_url"], status_code=303)
    return RedirectResponse(_home(request), status_code=303)


def _live_sub(sandbox: Sandbox, session: Obj, subscription_id: str) -> Obj | None:
    subscription = sandbox.store.get("subscription", subscription_id)
    if (
        subscription is None
        or subscription["customer"] != session["customer"]
        or subscription["status"] in ("canceled", "incomplete_expired")
    ):
        return None
    return subscription


def _product_name(sandbox: Sandbox, price: Obj) -> str:
    product = sandbox.store.get("product", price["product"])
    return str(product["name"] if product else price["product"])


def _price_text(price: Obj, quantity: int = 1) -> str:
    interval = price["recurring"]["interval"] if price["recurring"] else ""
    return f"{money(price['unit_amount'] * quantity, price['currency'])} per {interval}"


async def show(request: Request) -> Response:
    sandbox, session = _session(request)
    if session is None:
        return _missing()
    subs = [
        candidate
        for candidate in sandbox.store.newest_first("subscription")
        if candidate["customer"] == session["customer"]
        and candidate["status"] not in ("canceled", "incomplete_expired")
    ]
    home = _home(request)
    blocks = []
    for subscription in subs:
        item = subscription["items"]["data"][0]
        price = item["price"]
        base = f"{home}/subscriptions/{subscription['id']}"
        if subscription["cancel_at_period_end"]:
            ends = esc(_date(item["current_period_end"]))
            state = f'<p class="notice" data-testid="cancels-on">Cancels {ends}</p>'
            action = (
                f'<form method="post" action="{esc(base)}/renew"><button type="submit" '
                f'data-testid="renew-subscription">Renew plan</button></form>'
            )
        else:
            state = f"<p>Renews {esc(_date(item['current_period_end']))}</p>"
            action = (
                f'<p><a href="{esc(base)}/update" data-testid="update-subscription">Update plan</a></p>'
                f'<form method="post" action="{esc(base)}/cancel"><button type="submit" class="secondary" '
                f'data-testid="cancel-subscription">Cancel plan</button></form>'
            )
        blocks.append(
            f"<section "
            f'data-subscription="{esc(subscription["id"])}"><h2>{esc(_product_name(sandbox, price))}</h2>'
            f"<p>{esc(_price_text(price, item.get('quantity', 1)))} — {esc(subscription['status'])}</p>"
            f"{state}{action}</section>"
        )
    customer = sandbox.store.get("customer", session["customer"]) or {}
    default_payment_method_id = (customer.get("invoice_settings") or {}).get("default_payment_method")
    payment_method = (
        sandbox.store.get("payment_method", default_payment_method_id) if default_payment_method_id else None
    )
    card = (
        f"{payment_method['card']['brand']} •••• {payment_method['card']['last4']}"
        if payment_method
        else "No card on file"
    )
    methods = (
        f'<h2>Payment method</h2><p data-testid="default-card">{esc(card)}</p>'
        f'<p><a href="{esc(home)}/payment-method" data-testid="update-payment-method">'
        "Update payment method</a></p>"
    )
    back = (
        f'<p><a href="{esc(session["return_url"])}" data-testid="return-link">← Return</a></p>'
        if session["return_url"]
        else ""
    )
    body = back + "<h1>Current plan</h1>" + ("".join(blocks) or "<p>No active subscriptions.</p>") + methods
    return page("Billing", body, redirect_targets=_targets(session))


async def start_flow(request: Request) -> Response:
    """A `flow_data` session's URL: straight to the flow's page."""
    sandbox, session = _session(request)
    if session is None or not session.get("flow"):
        return _missing()
    flow = session["flow"]
    home = _home(request)
    if flow["type"] == "payment_method_update":
        return RedirectResponse(f"{home}/payment-method", status_code=303)
    if flow["type"] == "subscription_update":
        return RedirectResponse(
            f"{home}/subscriptions/{flow['subscription_update']['subscription']}/update", status_code=303
        )
    subscription_id = flow["subscription_cancel"]["subscription"]
    subscription = _live_sub(sandbox, session, subscription_id)
    if subscription is None:
        return page("Billing", "<h1>Subscription not found</h1>", status=404)
    ends = esc(_date(subscription["items"]["data"][0]["current_period_end"]))
    body = (
        f"<h1>Cancel your plan</h1><p>Your plan stays available until {ends}.</p>"
        f'<form method="post" action="{esc(home)}/subscriptions/{esc(subscription_id)}/cancel">'
        '<button type="submit" data-testid="confirm-cancel">Cancel plan</button></form>'
    )
    return page("Billing", body, redirect_targets=_targets(session))


def _choices(sandbox: Sandbox, subscription: Obj) -> list[Obj]:
    """Prices the customer may switch to: active, recurring, same currency and interval."""
    current = subscription["items"]["data"][0]["price"]
    recurring = current["recurring"]
    return [
        choice
        for choice in sandbox.store.newest_first("price")
        if choice["active"]
        and choice["recurring"]
        and choice["id"] != current["id"]
        and choice["currency"] == current["currency"]
        and (choice["recurring"]["interval"], choice["recurring"]["interval_count"])
        == (recurring["interval"], recurring["interval_count"])
    ][:20]


async def show_update(request: Request) -> Response:
    sandbox, session = _session(request)
    if session is None:
        return _missing()
    subscription = _live_sub(sandbox, session, request.path_params["sub"])
    if subscription is None:
        return page("Billing", "<h1>Subscription not found</h1>", status=404)
    current = subscription["items"]["data"][0]["price"]
    options = "".join(
        f'<form method="post"><input type=hidden name=price value="{esc(choice["id"])}">'
        f"<p>{esc(_product_name(sandbox, choice))} — {esc(_price_text(choice))}</p>"
        f'<button type="submit" data-testid="select-price" data-price="{esc(choice["id"])}">'
        "Select</button></form>"
        for choice in _choices(sandbox, subscription)
    )
    body = (
        f"<h1>Update plan</h1><p>Current: {esc(_product_name(sandbox, current))} "
        f"— {esc(_price_text(current))}</p>" + (options or "<p>There are no other plans to switch to.</p>")
    )
    return page("Billing", body, redirect_targets=_targets(session))


async def submit_update(request: Request) -> Response:
    sandbox, session = _session(request)
    if session is None:
        return _missing()
    subscription = _live_sub(sandbox, session, request.path_params["sub"])
    if subscription is None or subscription["cancel_at_period_end"]:
        return page("Billing", "<h1>Subscription not found</h1>", status=404)
    wanted = (await read_form(request)).get("price", "")
    price = next((choice for choice in _choices(sandbox, subscription) if choice["id"] == wanted), None)
    if price is None:
        return page("Billing", "<h1>That plan is not available</h1>", status=400)
    with sandbox.on_clock(sandbox.clock_of(subscription["customer"])):
        before = sandbox.snapshot(subscription)
        items = [dict(item) for item in subscription["items"]["data"]]
        items[0]["price"] = price
        items[0]["plan"] = plan_from_price(price)
        billing.change_items(sandbox, subscription, items, "create_prorations", sandbox.now())
        sandbox.emit_updated("customer.subscription.updated", before, subscription)
    sandbox.save()
    return _done(request, session)


def _card_form(error: Decline | None = None) -> str:
    alert = (
        f'<div class="FieldError" role="alert" data-error-code="{esc(error.code)}">{esc(error.message)}</div>'
        if error
        else ""
    )
    return f"""<h1>Update payment method</h1>
<form method="post" novalidate>
  <label for="cardNumber">Card information</label>
  <input id="cardNumber" name="cardNumber" inputmode="numeric" autocomplete="cc-number"
    placeholder="1234 1234 1234 1234">
  <div class="row">
    <div><input id="cardExpiry" name="cardExpiry" autocomplete="cc-exp" placeholder="MM / YY"
      aria-label="Expiration"></div>
    <div><input id="cardCvc" name="cardCvc" inputmode="numeric" autocomplete="cc-csc" placeholder="CVC"
      aria-label="CVC"></div>
  </div>
  <label for="billingName">Cardholder name</label>
  <input id="billingName" name="billingName" autocomplete="cc-name">
  {alert}
  <button type="submit" data-testid="save-payment-method">Save</button>
</form>"""


async def show_payment_method(request: Request) -> Response:
    _sandbox, session = _session(request)
    if session is None:
        return _missing()
    return page("Billing", _card_form(), redirect_targets=_targets(session))


async def submit_payment_method(request: Request) -> Response:
    """A new card becomes the customer's default and every live subscription's, as in Stripe's portal."""
    sandbox, session = _session(request)
    if session is None:
        return _missing()
    form = await read_form(request)
    customer = sandbox.get("customer", session["customer"])
    moment = dt.datetime.fromtimestamp(sandbox.now(), dt.UTC)
    try:
        card = check_card(
            form.get("cardNumber", ""),
            form.get("cardExpiry", ""),
            form.get("cardCvc", ""),
            moment.year,
            moment.month,
        )
        decline = decline_of(card)
        if decline is not None and behaviour_of(card) != "fail_after_attach":
            raise decline  # such a card cannot be attached, as on Stripe
    except Decline as decline:
        return page("Billing", _card_form(decline), status=402, redirect_targets=_targets(session))
    payment_method = payments.create_payment_method(
        sandbox, card, None, customer["email"], form.get("billingName") or None
    )
    payments.attach(sandbox, payment_method, customer["id"])
    before = sandbox.snapshot(customer)
    customer["invoice_settings"]["default_payment_method"] = payment_method["id"]
    sandbox.emit_updated("customer.updated", before, customer)
    for subscription in sandbox.store.objects["subscription"].values():
        if subscription["customer"] == customer["id"] and subscription["status"] not in (
            "canceled",
            "incomplete_expired",
        ):
            sub_before = sandbox.snapshot(subscription)
            subscription["default_payment_method"] = payment_method["id"]
            sandbox.emit_updated("customer.subscription.updated", sub_before, subscription)
    sandbox.save()
    return _done(request, session)


async def change(request: Request) -> Response:
    sandbox, session = _session(request)
    if session is None:
        return _missing()
    subscription = _live_sub(sandbox, session, request.path_params["sub"])
    action = request.path_params["action"]
    if subscription is None or action not in ("cancel", "renew"):
        return page("Billing", "<h1>Subscription not found</h1>", status=404)
    with sandbox.on_clock(sandbox.clock_of(subscription["customer"])):
        before = sandbox.snapshot(subscription)
        billing.schedule_cancel(sandbox, subscription, action == "cancel")
        sandbox.emit_updated("customer.subscription.updated", before, subscription)
    sandbox.save()
    return _done(request, session)
