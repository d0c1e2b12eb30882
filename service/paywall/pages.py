"""The payment page behind every elicitation URL, and the pages Stripe Checkout returns to.

The URL carries only an opaque id. Whoever opens it must be signed in as the user who called the
tool: anyone else gets a 403 and an audit record, and no Checkout Session is ever made for them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response
from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.service import AuditKind, count_recent, record
from service.billing.models import StripeCustomer
from service.billing.plans import Plan
from service.billing.stripe_gateway import CheckoutRequest
from service.db.metadata import utcnow
from service.dependencies import BrowserUser, RuntimeDep, SessionDep
from service.identity.endpoints import login_path
from service.identity.models import User
from service.paywall.elicitations import RateLimited, restart
from service.paywall.models import Elicitation, ElicitationStatus
from service.runtime import Runtime

router = APIRouter(tags=["payment"])

CHECKOUT_MIN_LIFETIME = timedelta(minutes=31)  # Stripe requires at least 30 minutes
CHECKOUT_MAX_LIFETIME = timedelta(hours=23)  # and at most 24 hours


async def _checked(
    runtime: Runtime, session: AsyncSession, user: User | None, elicitation_id: str, request: Request
) -> Elicitation | Response:
    """The elicitation if this browser may pay for it, otherwise the page to show instead."""
    pages = runtime.pages
    if user is None:
        return RedirectResponse(login_path(f"/pay/{elicitation_id}"), status_code=303)
    elicitation = await session.get(Elicitation, elicitation_id) if len(elicitation_id) <= 64 else None
    if elicitation is None:
        return pages.message(
            "Payment link not found",
            "This payment link does not exist. Call the tool again to get a new one.",
            status_code=404,
        )
    if elicitation.user_id != user.id:
        await record(
            session,
            AuditKind.IDENTITY_MISMATCH,
            user_id=user.id,
            elicitation_id=elicitation.id,
            owner=elicitation.user_id,
            client_ip=request.client.host if request.client else None,
        )
        return pages.message(
            "This link is not for you",
            f"This payment link belongs to another account; you are signed in as {user.username}. "
            "Nothing was charged. If you did not expect this link, someone may be trying to trick you "
            "into paying.",
            status_code=403,
        )
    if elicitation.status == ElicitationStatus.COMPLETED.value:
        return pages.message(
            "Already paid", "This subscription is active. Return to your MCP client; the tool is unlocked."
        )
    if elicitation.status == ElicitationStatus.EXPIRED.value or elicitation.expires_at <= utcnow():
        return runtime.form_page(
            request,
            "action.html",
            status_code=410,
            title="Payment link expired",
            message="This payment link has expired and nothing was charged. Start again here, or call the "
            "tool again in your MCP client to get a fresh link.",
            action=f"/pay/{elicitation.id}/restart",
            button="Start again",
        )
    return elicitation


async def _payable(
    runtime: Runtime, session: AsyncSession, user: User | None, elicitation_id: str, request: Request
) -> tuple[Elicitation, Plan, User] | Response:
    """The elicitation, its plan and the signed-in user, or the page to show instead."""
    checked = await _checked(runtime, session, user, elicitation_id, request)
    if not isinstance(checked, Elicitation):
        return checked
    assert user is not None  # _checked sends anonymous visitors to sign in
    plan = runtime.catalog.get(checked.plan_id)
    if plan is None:
        return runtime.pages.message("Plan unavailable", "This plan is no longer offered.", status_code=410)
    return checked, plan, user


@router.get("/pay/{elicitation_id}")
async def payment_page(
    elicitation_id: str, request: Request, runtime: RuntimeDep, session: SessionDep, user: BrowserUser
) -> Response:
    payable = await _payable(runtime, session, user, elicitation_id, request)
    if not isinstance(payable, tuple):
        return payable
    checked, plan, user = payable
    await record(session, AuditKind.PAGE_OPENED, user_id=user.id, elicitation_id=checked.id)
    return runtime.form_page(
        request,
        "pay.html",
        plan=plan,
        tool_name=checked.tool_name,
        username=user.username,
        checkout_domain=runtime.checkout_domain,
        elicitation_id=checked.id,
    )


@router.post("/pay/{elicitation_id}")
async def start_checkout(
    elicitation_id: str,
    request: Request,
    runtime: RuntimeDep,
    session: SessionDep,
    user: BrowserUser,
    csrf_token: Annotated[str | None, Form()] = None,
) -> Response:
    if not runtime.csrf.verify(request, csrf_token):
        return runtime.pages.message(
            "Form expired",
            "Please reload the payment page and try again.",
            status_code=400,
            link_href=f"/pay/{elicitation_id}",
            link_text="Back to the payment page",
        )
    payable = await _payable(runtime, session, user, elicitation_id, request)
    if not isinstance(payable, tuple):
        return payable
    checked, plan, user = payable

    gateway = runtime.stripe
    if checked.checkout_session_id is not None:
        current = await gateway.retrieve_checkout_session(checked.checkout_session_id)
        if current.status == "open" and current.url:
            return RedirectResponse(current.url, status_code=303)

    window = timedelta(hours=1)
    if (
        await count_recent(session, AuditKind.CHECKOUT_CREATED, user.id, window)
        >= runtime.settings.max_checkouts_per_hour
    ):
        await record(
            session, AuditKind.RATE_LIMITED, user_id=user.id, elicitation_id=checked.id, what="checkout"
        )
        response = runtime.pages.message(
            "Too many attempts",
            "You started too many checkouts in the last hour. Please try again later.",
            status_code=429,
        )
        response.headers["Retry-After"] = str(int(window.total_seconds()))
        return response

    customer = await session.get(StripeCustomer, user.id)
    if customer is None:
        customer = StripeCustomer(
            user_id=user.id, customer_id=await gateway.create_customer(user.id, user.username)
        )
        session.add(customer)
    now = utcnow()
    lifetime = min(max(checked.expires_at - now, CHECKOUT_MIN_LIFETIME), CHECKOUT_MAX_LIFETIME)
    checked.checkout_attempt += 1
    base = runtime.settings.public_base_url
    checkout = await gateway.create_checkout_session(
        CheckoutRequest(
            customer_id=customer.customer_id,
            price_id=await gateway.price_id(plan),
            user_id=user.id,
            elicitation_id=checked.id,
            plan_id=plan.id,
            success_url=f"{base}/pay/{checked.id}/success?session_id={{CHECKOUT_SESSION_ID}}",
            cancel_url=f"{base}/pay/{checked.id}/cancel",
            expires_at=int((now + lifetime).timestamp()),
            idempotency_key=f"checkout:{checked.id}:{checked.checkout_attempt}",
        )
    )
    checked.checkout_session_id = checkout.id
    session.add(checked)
    runtime.metrics.checkout_created(plan.id)
    await record(
        session, AuditKind.CHECKOUT_CREATED, user_id=user.id, elicitation_id=checked.id, checkout=checkout.id
    )
    assert checkout.url is not None
    return RedirectResponse(checkout.url, status_code=303)


@router.get("/pay/{elicitation_id}/success")
async def checkout_success(elicitation_id: str, runtime: RuntimeDep) -> Response:
    # Deliberately confirms nothing: only the signed webhook grants access.
    return runtime.pages.message(
        "Thanks! Waiting for Stripe's confirmation",
        "Stripe will confirm your payment to us directly, usually within seconds. Go back to your MCP "
        "client: the tool continues by itself once the confirmation arrives, or call it again.",
    )


@router.get("/pay/{elicitation_id}/cancel")
async def checkout_cancelled(elicitation_id: str, runtime: RuntimeDep) -> Response:
    return runtime.pages.message(
        "No payment made",
        "You left the checkout and nothing was charged.",
        link_href=f"/pay/{elicitation_id}",
        link_text="Back to the payment page",
    )


@router.post("/pay/{elicitation_id}/restart")
async def restart_expired(
    elicitation_id: str,
    request: Request,
    runtime: RuntimeDep,
    session: SessionDep,
    user: BrowserUser,
    csrf_token: Annotated[str | None, Form()] = None,
) -> Response:
    """A fresh elicitation in place of an expired one, owed to the same MCP sessions."""
    if user is None or not runtime.csrf.verify(request, csrf_token):
        return RedirectResponse(login_path(f"/pay/{elicitation_id}"), status_code=303)
    old = await session.get(Elicitation, elicitation_id) if len(elicitation_id) <= 64 else None
    expired = old is not None and (
        old.status == ElicitationStatus.EXPIRED.value
        or (old.status == ElicitationStatus.OPEN.value and old.expires_at <= utcnow())
    )
    if old is None or old.user_id != user.id or not expired:
        checked = await _checked(runtime, session, user, elicitation_id, request)  # the same refusals
        if isinstance(checked, Elicitation):
            return RedirectResponse(f"/pay/{elicitation_id}", status_code=303)
        return checked
    try:
        fresh = await restart(
            session,
            old,
            ttl=timedelta(seconds=runtime.settings.elicitation_ttl_seconds),
            max_new_per_hour=runtime.settings.max_elicitations_per_hour,
            metrics=runtime.metrics,
        )
    except RateLimited as exc:
        response = runtime.pages.message("Too many attempts", str(exc).capitalize() + ".", status_code=429)
        response.headers["Retry-After"] = str(exc.retry_after_seconds)
        return response
    return RedirectResponse(f"/pay/{fresh.id}", status_code=303)
