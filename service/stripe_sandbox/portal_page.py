"""The billing portal page a portal session's `url` opens.

Only what the service offers its customers through Stripe's portal: see each subscription, cancel
it at period end, and resume it before then. Changes go through the same code as
`subscriptions.update`, so the service receives the same `customer.subscription.updated` events
as from Stripe's portal.
"""

from __future__ import annotations

import datetime as dt

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from . import billing
from .pages import esc, money, page
from .sandbox import Sandbox

Obj = dict[str, object]


def _session(request: Request) -> tuple[Sandbox, dict[str, object] | None]:
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


async def show(request: Request) -> Response:
    sb, session = _session(request)
    if session is None:
        return _missing()
    subs = [
        s
        for s in sb.store.newest_first("subscription")
        if s["customer"] == session["customer"] and s["status"] != "canceled"
    ]
    blocks = []
    for sub in subs:
        item = sub["items"]["data"][0]
        price = item["price"]
        product = sb.store.get("product", price["product"])
        name = product["name"] if product else price["product"]
        interval = price["recurring"]["interval"] if price["recurring"] else ""
        base = f"{request.url.path.rstrip('/')}/subscriptions/{sub['id']}"
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
                f'<form method="post" action="{esc(base)}/cancel"><button type="submit" class="secondary" '
                f'data-testid="cancel-subscription">Cancel plan</button></form>'
            )
        blocks.append(
            f'<section data-subscription="{esc(sub["id"])}"><h2>{esc(name)}</h2>'
            f"<p>{esc(money(price['unit_amount'] * item['quantity'], price['currency']))} per {esc(interval)}"
            f" — {esc(sub['status'])}</p>{state}{action}</section>"
        )
    back = (
        f'<p><a href="{esc(session["return_url"])}" data-testid="return-link">← Return</a></p>'
        if session["return_url"]
        else ""
    )
    body = back + "<h1>Current plan</h1>" + ("".join(blocks) or "<p>No active subscriptions.</p>")
    return page("Billing", body, redirect_targets=(str(session["return_url"] or ""),))


async def change(request: Request) -> Response:
    sb, session = _session(request)
    if session is None:
        return _missing()
    sub = sb.store.get("subscription", request.path_params["sub"])
    if sub is None or sub["customer"] != session["customer"] or sub["status"] == "canceled":
        return page("Billing", "<h1>Subscription not found</h1>", status=404)
    before = sb.snapshot(sub)
    billing.schedule_cancel(sb, sub, request.path_params["action"] == "cancel")
    sb.emit_updated("customer.subscription.updated", before, sub)
    sb.save()
    portal = request.url.path.split("/subscriptions/")[0]
    return RedirectResponse(portal, status_code=303)
