"""Hosted receipt and invoice pages: a charge's `receipt_url` and an invoice's `hosted_invoice_url`.

Read-only HTML, each behind the unguessable secret in its URL, showing what Stripe's pages show:
amounts, lines, status and the card charged.
"""

from __future__ import annotations

import datetime as dt
import hmac
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .pages import esc, money, page
from .sandbox import Sandbox

Obj = dict[str, Any]


def _find(request: Request, kind: str, page_kind: str) -> tuple[Sandbox, Obj | None]:
    sb: Sandbox = request.app.state.sandbox
    obj = sb.store.get(kind, request.path_params["id"])
    if obj is None:
        return sb, None
    expected = str(sb.store.priv(str(obj["id"])).get(f"{page_kind}_secret") or "")
    if not expected or not hmac.compare_digest(expected, request.path_params["secret"]):
        return sb, None
    return sb, obj


def _date(timestamp: int) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%B %-d, %Y")


def _gone() -> Response:
    return page("Stripe sandbox", "<h1>This link is not valid</h1>", status=404)


async def receipt(request: Request) -> Response:
    _sb, ch = _find(request, "charge", "receipts")
    if ch is None:
        return _gone()
    card = ch["payment_method_details"]["card"]
    refunded = (
        f"<p data-testid=refunded>Refunded {esc(money(ch['amount_refunded'], ch['currency']))}</p>"
        if ch["amount_refunded"]
        else ""
    )
    body = (
        f"<h1>Receipt</h1><p class=amount data-testid=amount>{esc(money(ch['amount'], ch['currency']))}</p>"
        f"<p>Paid {esc(_date(ch['created']))} with {esc(card['brand'])} •••• {esc(card['last4'])}</p>"
        f"<p>{esc(ch['description'] or '')}</p>{refunded}<p><small>Receipt for {esc(ch['id'])}</small></p>"
    )
    return page("Receipt", body)


async def invoice(request: Request) -> Response:
    _sb, inv = _find(request, "invoice", "i")
    if inv is None:
        return _gone()
    rows = "".join(
        f"<li>{esc(line['description'])} — {esc(money(line['amount'], line['currency']))}</li>"
        for line in inv["lines"]["data"]
    )
    footer = f"<p data-testid=footer>{esc(inv['footer'])}</p>" if inv.get("footer") else ""
    body = (
        f"<h1>Invoice {esc(inv['number'])}</h1>"
        f"<p class=amount data-testid=amount>{esc(money(inv['amount_due'], inv['currency']))}</p>"
        f"<p data-testid=status>Status: {esc(inv['status'])}</p>"
        f"<p>Issued {esc(_date(inv['created']))} to {esc(inv['customer_email'] or inv['customer'])}</p>"
        f"<ul>{rows}</ul>{footer}"
    )
    return page("Invoice", body)
