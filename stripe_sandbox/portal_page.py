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

from . import billing, payments
from .cards import Decline, behaviour_of, check_card, decline_of
from .objects import plan_from_price
from .pages import esc, money, page, read_form
from .sandbox import Sandbox

Obj = dict[str, Any]


def _session(request: Request) -> tuple[Sandbox, Obj | None]:
    sb: Sandbox = request.app.state.sandbox
    billing.advance_to(sb, sb.now())
    session_id = sb.store.priv("portal_secrets").get(request.path_params["secret"])
    return sb, (sb.store.get("billing_portal.session", session_id) if session_id else None)


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


def _live_sub(sb: Sandbox, session: Obj, sub_id: str) -> Obj | None:
    sub = sb.store.get("subscription", sub_id)
    if (
        sub is None
        or sub["customer"] != session["customer"]
        or sub["status"] in ("canceled", "incomplete_expired")
    ):
        return None
    return sub


def _product_name(sb: Sandbox, price: Obj) -> str:
    product = sb.store.get("product", price["product"])
    return str(product["name"] if product else price["product"])


def _price_text(price: Obj, quantity: int = 1) -> str:
    interval = price["recurring"]["interval"] if price["recurring"] else ""
    return f"{money(price['unit_amount'] * quantity, price['currency'])} per {interval}"


async def show(request: Request) -> Response:
    sb, session = _session(request)
    if session is None:
        return _missing()
    subs = [
        s
        for s in sb.store.newest_first("subscription")
        if s["customer"] == session["customer"] and s["status"] not in ("canceled", "incomplete_expired")
    ]
    home = _home(request)
    blocks = []
    for sub in subs:
        item = sub["items"]["data"][0]
        price = item["price"]
        base = f"{home}/subscriptions/{sub['id']}"
        if sub["cancel_at_period_end"]:
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
            f'<section data-subscription="{esc(sub["id"])}"><h2>{esc(_product_name(sb, price))}</h2>'
            f"<p>{esc(_price_text(price, item.get('quantity', 1)))} — {esc(sub['status'])}</p>"
            f"{state}{action}</section>"
        )
    customer = sb.store.get("customer", session["customer"]) or {}
    default_pm = (customer.get("invoice_settings") or {}).get("default_payment_method")
    pm = sb.store.get("payment_method", default_pm) if default_pm else None
    card = f"{pm['card']['brand']} •••• {pm['card']['last4']}" if pm else "No card on file"
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
    sb, session = _session(request)
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
    sub_id = flow["subscription_cancel"]["subscription"]
    sub = _live_sub(sb, session, sub_id)
    if sub is None:
        return page("Billing", "<h1>Subscription not found</h1>", status=404)
    ends = esc(_date(sub["items"]["data"][0]["current_period_end"]))
    body = (
        f"<h1>Cancel your plan</h1><p>Your plan stays available until {ends}.</p>"
        f'<form method="post" action="{esc(home)}/subscriptions/{esc(sub_id)}/cancel">'
        '<button type="submit" data-testid="confirm-cancel">Cancel plan</button></form>'
    )
    return page("Billing", body, redirect_targets=_targets(session))


def _choices(sb: Sandbox, sub: Obj) -> list[Obj]:
    """Prices the customer may switch to: active, recurring, same currency and interval."""
    current = sub["items"]["data"][0]["price"]
    recurring = current["recurring"]
    return [
        p
        for p in sb.store.newest_first("price")
        if p["active"]
        and p["recurring"]
        and p["id"] != current["id"]
        and p["currency"] == current["currency"]
        and (p["recurring"]["interval"], p["recurring"]["interval_count"])
        == (recurring["interval"], recurring["interval_count"])
    ][:20]


async def show_update(request: Request) -> Response:
    sb, session = _session(request)
    if session is None:
        return _missing()
    sub = _live_sub(sb, session, request.path_params["sub"])
    if sub is None:
        return page("Billing", "<h1>Subscription not found</h1>", status=404)
    current = sub["items"]["data"][0]["price"]
    options = "".join(
        f'<form method="post"><input type=hidden name=price value="{esc(p["id"])}">'
        f"<p>{esc(_product_name(sb, p))} — {esc(_price_text(p))}</p>"
        f'<button type="submit" data-testid="select-price" data-price="{esc(p["id"])}">Select</button></form>'
        for p in _choices(sb, sub)
    )
    body = (
        f"<h1>Update plan</h1><p>Current: {esc(_product_name(sb, current))} — {esc(_price_text(current))}</p>"
        + (options or "<p>There are no other plans to switch to.</p>")
    )
    return page("Billing", body, redirect_targets=_targets(session))


async def submit_update(request: Request) -> Response:
    sb, session = _session(request)
    if session is None:
        return _missing()
    sub = _live_sub(sb, session, request.path_params["sub"])
    if sub is None or sub["cancel_at_period_end"]:
        return page("Billing", "<h1>Subscription not found</h1>", status=404)
    wanted = (await read_form(request)).get("price", "")
    price = next((p for p in _choices(sb, sub) if p["id"] == wanted), None)
    if price is None:
        return page("Billing", "<h1>That plan is not available</h1>", status=400)
    with sb.on_clock(sb.clock_of(sub["customer"])):
        before = sb.snapshot(sub)
        items = [dict(i) for i in sub["items"]["data"]]
        items[0]["price"] = price
        items[0]["plan"] = plan_from_price(price)
        billing.change_items(sb, sub, items, "create_prorations", sb.now())
        sb.emit_updated("customer.subscription.updated", before, sub)
    sb.save()
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
    _sb, session = _session(request)
    if session is None:
        return _missing()
    return page("Billing", _card_form(), redirect_targets=_targets(session))


async def submit_payment_method(request: Request) -> Response:
    """A new card becomes the customer's default and every live subscription's, as in Stripe's portal."""
    sb, session = _session(request)
    if session is None:
        return _missing()
    form = await read_form(request)
    customer = sb.get("customer", session["customer"])
    moment = dt.datetime.fromtimestamp(sb.now(), dt.UTC)
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
    pm = payments.create_payment_method(sb, card, None, customer["email"], form.get("billingName") or None)
    payments.attach(sb, pm, customer["id"])
    before = sb.snapshot(customer)
    customer["invoice_settings"]["default_payment_method"] = pm["id"]
    sb.emit_updated("customer.updated", before, customer)
    for sub in sb.store.objects["subscription"].values():
        if sub["customer"] == customer["id"] and sub["status"] not in ("canceled", "incomplete_expired"):
            sub_before = sb.snapshot(sub)
            sub["default_payment_method"] = pm["id"]
            sb.emit_updated("customer.subscription.updated", sub_before, sub)
    sb.save()
    return _done(request, session)


async def change(request: Request) -> Response:
    sb, session = _session(request)
    if session is None:
        return _missing()
    sub = _live_sub(sb, session, request.path_params["sub"])
    action = request.path_params["action"]
    if sub is None or action not in ("cancel", "renew"):
        return page("Billing", "<h1>Subscription not found</h1>", status=404)
    with sb.on_clock(sb.clock_of(sub["customer"])):
        before = sb.snapshot(sub)
        billing.schedule_cancel(sb, sub, action == "cancel")
        sb.emit_updated("customer.subscription.updated", before, sub)
    sb.save()
    return _done(request, session)
