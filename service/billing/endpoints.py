"""`/billing`: the signed-in user's way to Stripe's billing portal, behind our own identity check."""

from __future__ import annotations

import logging
from datetime import timedelta

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from stripe import StripeError

from service.audit.service import AuditKind, count_recent, record
from service.billing.models import StripeCustomer
from service.billing.redirects import UntrustedRedirect
from service.billing.stripe_unavailable import stripe_unavailable
from service.dependencies import (
    BrowserSessionSecret,
    CsrfChecked,
    FormPagesDep,
    PageAuditsDep,
    PagesDep,
    SessionDep,
    SessionFactoryDep,
    SettingsDep,
    SignedInUser,
    StripeDep,
)
from service.identity.paths import login_path
from service.identity.service import browser_session_user
from service.web.pages import Pages

router = APIRouter(tags=["billing"])
logger = logging.getLogger("service.billing.endpoints")

PORTAL_ATTEMPT_WINDOW = timedelta(hours=1)


@router.get("/billing")
async def billing_page(
    user: SignedInUser, session: SessionDep, pages: PagesDep, form_pages: FormPagesDep
) -> Response:
    if await session.get(StripeCustomer, user.id) is None:
        return pages.message("No subscription yet", "You have no subscription to manage yet.")
    return form_pages.render(
        "action.html",
        title="Manage your subscription",
        message=f"Signed in as {user.username}. Stripe's billing portal lets you update your card, "
        "cancel at the end of the period, or resume.",
        action="/billing",
        button="Open the billing portal",
    )


async def _sign_in_for_billing(_: Request, __: Pages) -> Response:
    return RedirectResponse(login_path("/billing"), status_code=303)


@router.post("/billing", dependencies=[Depends(CsrfChecked(_sign_in_for_billing))])
async def open_portal(
    sessions: SessionFactoryDep,
    secret: BrowserSessionSecret,
    pages: PagesDep,
    stripe: StripeDep,
    settings: SettingsDep,
    audits: PageAuditsDep,
) -> Response:
    async with sessions() as session, session.begin():  # read, and let go before Stripe
        user = await browser_session_user(session, secret)
        if user is None:
            return RedirectResponse(login_path("/billing"), status_code=303)
        customer = await session.get(StripeCustomer, user.id)
        if customer is None:
            return pages.message("No subscription yet", "You have no subscription to manage yet.")
        # Counted as the pay button's presses are (audit rows, so across replicas), before Stripe.
        attempts = await count_recent(session, AuditKind.PORTAL_ATTEMPT, user.id, PORTAL_ATTEMPT_WINDOW)
        if attempts >= settings.billing.max_portal_sessions_per_user_per_hour:
            # Sampled as the pay page's refusals are: a user can press a refused button endlessly.
            count = audits.take((user.id, "billing_portal", AuditKind.RATE_LIMITED))
            if count is not None:
                await record(
                    session, AuditKind.RATE_LIMITED, user_id=user.id, what="billing_portal", count=count
                )
            response = pages.message(
                "Too many attempts",
                "You opened the billing portal too often in the last hour. Please try again later.",
                status_code=429,
            )
            response.headers["Retry-After"] = str(int(PORTAL_ATTEMPT_WINDOW.total_seconds()))
            return response
        await record(session, AuditKind.PORTAL_ATTEMPT, user_id=user.id)
    try:
        url = await stripe.create_portal_session(
            customer.customer_id, return_url=f"{settings.http.public_base_url}/billing/done"
        )
    except UntrustedRedirect:
        logger.exception("refused a billing portal redirect from Stripe")
        return pages.message(
            "Billing portal unavailable",
            "Stripe answered with an address we do not send browsers to. Please try again later.",
            status_code=502,
        )
    except StripeError as exc:  # e.g. a customer Stripe no longer knows: a page, not a bare 500
        logger.warning("could not open the billing portal for user %s: %s", user.id, type(exc).__name__)
        return stripe_unavailable(
            pages, exc, title="Billing portal unavailable", failed="Stripe could not open your billing portal"
        )
    return RedirectResponse(url, status_code=303)


@router.get("/billing/done")
async def back_from_portal(pages: PagesDep) -> Response:
    return pages.message(
        "Back from the billing portal",
        "Changes take effect as soon as Stripe confirms them to us. Ask your MCP client for billing_status.",
    )
