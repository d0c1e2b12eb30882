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
    sandbox: Sandbox = request.app.state.sandbox
    obj = sandbox.store.get(kind, request.path_params["id"])
    if obj is None:
        return sandbox, None
    expected = str(sandbox.store.priv(str(obj["id"])).get(f"{page_kind}_secret") or "")
    if not expected or not hmac.compare_digest(expected, request.path_params["secret"]):
        return sandbox, None
    return sandbox, obj


def _date(timestamp: int) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%B %-d, %Y")


def _gone() -> Response:
    return page("Stripe sandbox", "<h1>This link is not valid</h1>", status=404)


async def receipt(request: Request) -> Response:
    _sandbox, charge = _find(request, "charge", "receipts")
    if charge is None:
        return _gone()
    card = charge["payment_method_details"]["card"]
    refunded = (
        f"<p data-testid=refunded>Refunded {esc(money(charge['amount_refunded'], charge['currency']))}</p>"
        if charge["amount_refunded"]
        else ""
    )
    body = (
        f"<h1>Receipt</h1><p class=amount "
        f"data-testid=amount>{esc(money(charge['amount'], charge['currency']))}</p>"
        f"<p>Paid {esc(_date(charge['created']))} with {esc(card['brand'])} •••• {esc(card['last4'])}</p>"
        f"<p>{esc(charge['description'] or '')}</p>{refunded}<p><small>Receipt "
        f"for {esc(charge['id'])}</small></p>"
    )
    return page("Receipt", body)


async def invoice(request: Request) -> Response:
    _sandbox, invoice = _find(request, "invoice", "i")
    if invoice is None:
        return _gone()
    rows = "".join(
        f"<li>{esc(line['description'])} — {esc(money(line['amount'], line['currency']))}</li>"
        for line in invoice["lines"]["data"]
    )
    footer = f"<p data-testid=footer>{esc(invoice['footer'])}</p>" if invoice.get("footer") else ""
    body = (
        f"<h1>Invoice {esc(invoice['number'])}</h1>"
        f"<p class=amount data-testid=amount>{esc(money(invoice['amount_due'], invoice['currency']))}</p>"
        f"<p data-testid=status>Status: {esc(invoice['status'])}</p>"
        f"<p>Issued {esc(_date(invoice['created']))} to "
        f"{esc(invoice['customer_email'] or invoice['customer'])}</p>"
        f"<ul>{rows}</ul>{footer}"
    )
    return page("Invoice", body)
