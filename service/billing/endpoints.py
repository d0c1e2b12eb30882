"""`/billing`: the signed-in user's way to Stripe's billing portal, behind our own identity check."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from service.billing.models import StripeCustomer
from service.billing.redirects import UntrustedRedirect
from service.dependencies import BrowserUser, RuntimeDep, SessionDep
from service.identity.endpoints import login_path
from service.identity.service import browser_session_user
from service.web.cookies import SESSION_COOKIE

router = APIRouter(tags=["billing"])
logger = logging.getLogger("service.billing.endpoints")


@router.get("/billing")
async def billing_page(
    request: Request, runtime: RuntimeDep, session: SessionDep, user: BrowserUser
) -> Response:
    if user is None:
        return RedirectResponse(login_path("/billing"), status_code=303)
    if await session.get(StripeCustomer, user.id) is None:
        return runtime.pages.message("No subscription yet", "You have no subscription to manage yet.")
    return runtime.form_page(
        request,
        "action.html",
        title="Manage your subscription",
        message=f"Signed in as {user.username}. Stripe's billing portal lets you update your card, "
        "cancel at the end of the period, or resume.",
        action="/billing",
        button="Open the billing portal",
    )


@router.post("/billing")
async def open_portal(
    request: Request,
    runtime: RuntimeDep,
    csrf_token: Annotated[str | None, Form()] = None,
) -> Response:
    if not runtime.csrf.verify(request, csrf_token):
        return RedirectResponse(login_path("/billing"), status_code=303)
    async with runtime.sessions() as session, session.begin():  # read, and let go before Stripe
        user = await browser_session_user(session, request.cookies.get(runtime.cookies.name(SESSION_COOKIE)))
        customer = await session.get(StripeCustomer, user.id) if user is not None else None
    if user is None:
        return RedirectResponse(login_path("/billing"), status_code=303)
    if customer is None:
        return runtime.pages.message("No subscription yet", "You have no subscription to manage yet.")
    try:
        url = await runtime.stripe.create_portal_session(
            customer.customer_id, return_url=f"{runtime.settings.http.public_base_url}/billing/done"
        )
    except UntrustedRedirect:
        logger.exception("refused a billing portal redirect from Stripe")
        return runtime.pages.message(
            "Billing portal unavailable",
            "Stripe answered with an address we do not send browsers to. Please try again later.",
            status_code=502,
        )
    return RedirectResponse(url, status_code=303)


@router.get("/billing/done")
async def back_from_portal(runtime: RuntimeDep) -> Response:
    return runtime.pages.message(
        "Back from the billing portal",
        "Changes take effect as soon as Stripe confirms them to us. Ask your MCP client for billing_status.",
    )
