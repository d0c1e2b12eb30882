"""The payment page behind every elicitation URL, and the pages Stripe Checkout returns to.

The URL carries only an opaque id. Whoever opens it must be signed in as the user who called the
tool: anyone else gets a 403 and an audit record, and no Checkout Session is ever made for them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated

import stripe
from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response
from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.service import AuditKind, count_recent, record
from service.billing.models import StripeCustomer
from service.billing.plans import Plan
from service.billing.redirects import UntrustedRedirect
from service.billing.stripe_fields import field_of
from service.billing.stripe_gateway import CheckoutRequest, CreditCheckoutRequest
from service.billing.subscriptions import entitled_plan_ids, plan_of
from service.db.metadata import utcnow
from service.dependencies import BrowserUser, RuntimeDep, SessionDep
from service.identity.endpoints import login_path
from service.identity.models import User
from service.identity.service import browser_session_user
from service.paywall.elicitations import RateLimited, restart
from service.paywall.models import Elicitation, ElicitationStatus
from service.runtime import Runtime
from service.web.cookies import SESSION_COOKIE

router = APIRouter(tags=["payment"])
logger = logging.getLogger("service.paywall.pages")

CHECKOUT_MIN_LIFETIME = timedelta(minutes=31)  # Stripe requires at least 30 minutes
CHECKOUT_MAX_LIFETIME = timedelta(hours=23)  # and at most 24 hours
CHECKOUT_WINDOW = timedelta(hours=1)
PAY_ATTEMPT_WINDOW = timedelta(hours=1)
# A subscription in one of these is one the customer pays for, or is about to.
LIVE_STATUSES = frozenset({"active", "trialing", "past_due"})


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
            client_ip=runtime.client_ip(request),
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
    runtime: Runtime,
    session: AsyncSession,
    user: User | None,
    elicitation_id: str,
    request: Request,
    plan_id: str | None = None,
) -> tuple[Elicitation, Plan, User] | Response:
    """The elicitation, the plan to pay for (its own, or `plan_id` if that also unlocks its tool)
    and the signed-in user, or the page to show instead."""
    checked = await _checked(runtime, session, user, elicitation_id, request)
    if not isinstance(checked, Elicitation):
        return checked
    assert user is not None  # _checked sends anonymous visitors to sign in
    wanted = plan_id or checked.plan_id
    plan = runtime.catalog.get(wanted)
    if (
        plan is not None
        and wanted != checked.plan_id
        and plan not in runtime.paywall.plans_for(checked.tool_name)
    ):
        plan = None
    if plan is None:
        return runtime.pages.message("Plan unavailable", "This plan is no longer offered.", status_code=410)
    return checked, plan, user


def _covers(runtime: Runtime, elicitation: Elicitation, plan: Plan, plan_ids: frozenset[str]) -> bool:
    """Whether these plans make paying for `plan` pointless: they include it, or one of them unlocks
    the tool without a limit on calls (a plan whose included calls ran out does not)."""
    if plan.id in plan_ids:
        return True
    for owned in runtime.paywall.plans_for(elicitation.tool_name):
        if owned.id in plan_ids and not owned.counts_calls:
            return True
    return False


@router.get("/pay/{elicitation_id}")
async def payment_page(
    elicitation_id: str, request: Request, runtime: RuntimeDep, session: SessionDep, user: BrowserUser
) -> Response:
    payable = await _payable(runtime, session, user, elicitation_id, request)
    if not isinstance(payable, tuple):
        return payable
    checked, plan, user = payable
    await record(session, AuditKind.PAGE_OPENED, user_id=user.id, elicitation_id=checked.id)
    grace = timedelta(seconds=runtime.settings.billing.past_due_grace_seconds)
    owned = frozenset(await entitled_plan_ids(session, user.id, grace=grace))
    return runtime.form_page(
        request,
        "pay.html",
        plan=plan,
        # The user has this plan and its included calls are used up: an upgrade or credits help.
        plan_owned=plan.id in owned,
        other_plans=[
            other
            for other in runtime.paywall.plans_for(checked.tool_name)
            if other.id != plan.id and other.id not in owned
        ],
        packs=runtime.catalog.credit_packs(),
        tool_name=checked.tool_name,
        username=user.username,
        checkout_domain=runtime.checkout_domain,
        elicitation_id=checked.id,
    )


@dataclass(frozen=True)
class CheckoutPlan:
    """What the pay button's read transaction found; the Stripe calls that follow work from this alone."""

    elicitation: Elicitation
    plan: Plan
    user_id: str
    username: str
    customer_id: str | None


async def _checkouts_exceeded(
    runtime: Runtime, session: AsyncSession, user_id: str, elicitation_id: str
) -> Response | None:
    """429 (and an audit row) once the user started `MAX_CHECKOUTS_PER_HOUR` checkouts of any kind."""
    checkouts = await count_recent(session, AuditKind.CHECKOUT_CREATED, user_id, CHECKOUT_WINDOW)
    if checkouts < runtime.settings.paywall.max_checkouts_per_hour:
        return None
    await record(
        session, AuditKind.RATE_LIMITED, user_id=user_id, elicitation_id=elicitation_id, what="checkout"
    )
    return _too_many(runtime, "started too many checkouts in the last hour", CHECKOUT_WINDOW)


def _too_many(runtime: Runtime, what: str, retry_after: timedelta) -> Response:
    response = runtime.pages.message(
        "Too many attempts", f"You {what}. Please try again later.", status_code=429
    )
    response.headers["Retry-After"] = str(int(retry_after.total_seconds()))
    return response


def _waiting_for_confirmation(runtime: Runtime) -> Response:
    return runtime.pages.message(
        "Payment received, waiting for confirmation",
        "Stripe has your payment and is confirming it to us, usually within seconds. Nothing more to "
        "pay: go back to your MCP client, the tool continues by itself once the confirmation arrives.",
    )


def _untrusted_redirect(runtime: Runtime) -> Response:
    return runtime.pages.message(
        "Payment page unavailable",
        "Stripe answered with an address we do not send browsers to. Nothing was charged; please try "
        "again later.",
        status_code=502,
    )


async def _pay_attempts_exceeded(
    runtime: Runtime, session: AsyncSession, user_id: str, elicitation_id: str
) -> Response | None:
    """Count this press of the pay button, or refuse it: per user and per elicitation, before Stripe."""
    settings = runtime.settings
    by_user = await count_recent(session, AuditKind.CHECKOUT_ATTEMPT, user_id, PAY_ATTEMPT_WINDOW)
    by_elicitation = await count_recent(
        session, AuditKind.CHECKOUT_ATTEMPT, user_id, PAY_ATTEMPT_WINDOW, elicitation_id=elicitation_id
    )
    if (
        by_user >= settings.paywall.max_pay_attempts_per_user_per_hour
        or by_elicitation >= settings.paywall.max_pay_attempts_per_elicitation_per_hour
    ):
        await record(
            session, AuditKind.RATE_LIMITED, user_id=user_id, elicitation_id=elicitation_id, what="pay"
        )
        return _too_many(runtime, "pressed the pay button too often in the last hour", PAY_ATTEMPT_WINDOW)
    await record(session, AuditKind.CHECKOUT_ATTEMPT, user_id=user_id, elicitation_id=elicitation_id)
    return None


async def _read_checkout_plan(
    runtime: Runtime, request: Request, elicitation_id: str, plan_id: str | None
) -> CheckoutPlan | Response:
    """The read step of the pay button, in one short transaction: who, what, whether to go on at all."""
    async with runtime.sessions() as session, session.begin():
        user = await browser_session_user(session, request.cookies.get(runtime.cookies.name(SESSION_COOKIE)))
        payable = await _payable(runtime, session, user, elicitation_id, request, plan_id)
        if not isinstance(payable, tuple):
            return payable
        elicitation, plan, user = payable
        refused = await _pay_attempts_exceeded(runtime, session, user.id, elicitation.id)
        if refused is not None:
            return refused
        # Fresh from the database, not the paywall's cache: a payment confirmed seconds ago counts.
        grace = timedelta(seconds=runtime.settings.billing.past_due_grace_seconds)
        entitled = frozenset(await entitled_plan_ids(session, user.id, grace=grace))
        if _covers(runtime, elicitation, plan, entitled):
            return runtime.pages.message(
                "Already subscribed",
                "Your subscription already unlocks this tool; nothing was charged. Return to your MCP "
                "client and call the tool again.",
            )
        if (limited := await _checkouts_exceeded(runtime, session, user.id, elicitation.id)) is not None:
            return limited
        customer = await session.get(StripeCustomer, user.id)
        session.expunge(elicitation)
        return CheckoutPlan(
            elicitation, plan, user.id, user.username, customer.customer_id if customer else None
        )


async def _existing_payment(runtime: Runtime, found: CheckoutPlan) -> Response | None:
    """What to do instead of a new Checkout Session, if the user already paid or is paying (Stripe reads)."""
    gateway = runtime.stripe
    elicitation = found.elicitation
    if elicitation.checkout_session_id is not None:
        current = await gateway.retrieve_checkout_session(elicitation.checkout_session_id)
        if field_of(field_of(current, "metadata"), "plan_id") not in (None, found.plan.id):
            pass  # that checkout is for another plan than the one chosen now
        elif current.status == "complete":
            return _waiting_for_confirmation(runtime)
        if current.status == "open" and current.url:
            return RedirectResponse(gateway.checkout_url(current), status_code=303)
    if found.customer_id is None:
        return None
    live_plans = {
        plan_id
        for subscription in await gateway.list_subscriptions(found.customer_id)
        if field_of(subscription, "status") in LIVE_STATUSES
        and (plan_id := plan_of(subscription, runtime.catalog)) is not None
    }
    if _covers(runtime, elicitation, found.plan, frozenset(live_plans)):
        return _waiting_for_confirmation(runtime)  # paid, the webhook has not told us yet
    if live_plans:
        # A second subscription would bill twice: change the plan of the one there is instead.
        url = await gateway.create_portal_session(
            found.customer_id, return_url=f"{runtime.settings.http.public_base_url}/pay/{elicitation.id}"
        )
        return RedirectResponse(url, status_code=303)
    return None


@router.post("/pay/{elicitation_id}")
async def start_checkout(
    elicitation_id: str,
    request: Request,
    runtime: RuntimeDep,
    csrf_token: Annotated[str | None, Form()] = None,
    plan_id: Annotated[str | None, Form(max_length=64)] = None,
) -> Response:
    """Read (a short transaction), then Stripe (no transaction held), then write (a short transaction).

    `plan_id`: another plan that unlocks the tool, chosen on the page instead of the link's own."""
    if not runtime.csrf.verify(request, csrf_token):
        return runtime.pages.message(
            "Form expired",
            "Please reload the payment page and try again.",
            status_code=400,
            link_href=f"/pay/{elicitation_id}",
            link_text="Back to the payment page",
        )
    found = await _read_checkout_plan(runtime, request, elicitation_id, plan_id)
    if not isinstance(found, CheckoutPlan):
        return found
    gateway = runtime.stripe
    elicitation = found.elicitation
    try:
        instead = await _existing_payment(runtime, found)
        if instead is not None:
            return instead
        customer_id = found.customer_id or await gateway.create_customer(found.user_id, found.username)
        now = utcnow()
        lifetime = min(max(elicitation.expires_at - now, CHECKOUT_MIN_LIFETIME), CHECKOUT_MAX_LIFETIME)
        attempt = elicitation.checkout_attempt + 1
        base = runtime.settings.http.public_base_url
        checkout = await gateway.create_checkout_session(
            CheckoutRequest(
                customer_id=customer_id,
                price_id=await gateway.price_id(found.plan),
                metered_price_ids=tuple(
                    [
                        await gateway.price_id(metered)
                        for metered in runtime.catalog.metered_prices_of(found.plan)
                    ]
                ),
                user_id=found.user_id,
                elicitation_id=elicitation.id,
                plan_id=found.plan.id,
                success_url=f"{base}/pay/{elicitation.id}/success?session_id={{CHECKOUT_SESSION_ID}}",
                cancel_url=f"{base}/pay/{elicitation.id}/cancel",
                expires_at=int((now + lifetime).timestamp()),
                idempotency_key=f"checkout:{elicitation.id}:{attempt}",
            )
        )
        url = gateway.checkout_url(checkout)
    except UntrustedRedirect:
        logger.exception("refused a redirect from Stripe for elicitation %s", elicitation.id)
        return _untrusted_redirect(runtime)
    except stripe.IdempotencyError:
        # Two presses at once made the same request with different expiry times; the other one won.
        return RedirectResponse(f"/pay/{elicitation.id}", status_code=303)

    await _remember_checkout(
        runtime, found, elicitation.id, attempt, customer_id, checkout.id, plan_checkout=True
    )
    runtime.metrics.checkout_created(found.plan.id)
    return RedirectResponse(url, status_code=303)


async def _read_credit_checkout(
    runtime: Runtime, request: Request, elicitation_id: str
) -> CheckoutPlan | Response:
    """The read step of a credit pack's button: who, for which link, whether to go on at all."""
    async with runtime.sessions() as session, session.begin():
        user = await browser_session_user(session, request.cookies.get(runtime.cookies.name(SESSION_COOKIE)))
        payable = await _payable(runtime, session, user, elicitation_id, request)
        if not isinstance(payable, tuple):
            return payable
        elicitation, plan, user = payable
        refused = await _pay_attempts_exceeded(runtime, session, user.id, elicitation.id)
        if refused is not None:
            return refused
        if (limited := await _checkouts_exceeded(runtime, session, user.id, elicitation.id)) is not None:
            return limited
        customer = await session.get(StripeCustomer, user.id)
        session.expunge(elicitation)
        return CheckoutPlan(
            elicitation, plan, user.id, user.username, customer.customer_id if customer else None
        )


@router.post("/pay/{elicitation_id}/credits")
async def buy_credits(
    elicitation_id: str,
    request: Request,
    runtime: RuntimeDep,
    csrf_token: Annotated[str | None, Form(max_length=200)] = None,
    pack_id: Annotated[str | None, Form(max_length=64)] = None,
) -> Response:
    """Checkout in payment mode for a credit pack: read, then Stripe (no transaction held), then write."""
    if not runtime.csrf.verify(request, csrf_token):
        return runtime.pages.message(
            "Form expired",
            "Please reload the payment page and try again.",
            status_code=400,
            link_href=f"/pay/{elicitation_id}",
            link_text="Back to the payment page",
        )
    pack = runtime.catalog.credit_pack(pack_id or "")
    if pack is None:
        return runtime.pages.message(
            "Credit pack unavailable", "This credit pack is not offered.", status_code=404
        )
    found = await _read_credit_checkout(runtime, request, elicitation_id)
    if not isinstance(found, CheckoutPlan):
        return found
    gateway = runtime.stripe
    elicitation = found.elicitation
    attempt = elicitation.checkout_attempt + 1
    try:
        customer_id = found.customer_id or await gateway.create_customer(found.user_id, found.username)
        base = runtime.settings.http.public_base_url
        checkout = await gateway.create_credit_checkout_session(
            CreditCheckoutRequest(
                customer_id=customer_id,
                price_id=await gateway.price_id(pack),
                user_id=found.user_id,
                elicitation_id=elicitation.id,
                pack_id=pack.id,
                success_url=f"{base}/pay/{elicitation.id}/success?session_id={{CHECKOUT_SESSION_ID}}",
                cancel_url=f"{base}/pay/{elicitation.id}/cancel",
                expires_at=int((utcnow() + CHECKOUT_MIN_LIFETIME).timestamp()),
                idempotency_key=f"credits:{elicitation.id}:{pack.id}:{attempt}",
            )
        )
        url = gateway.checkout_url(checkout)
    except UntrustedRedirect:
        logger.exception("refused a redirect from Stripe for elicitation %s", elicitation.id)
        return _untrusted_redirect(runtime)
    except stripe.IdempotencyError:
        return RedirectResponse(f"/pay/{elicitation.id}", status_code=303)

    await _remember_checkout(
        runtime,
        found,
        elicitation.id,
        attempt,
        customer_id,
        checkout.id,
        plan_checkout=False,
        credit_pack=pack.id,
    )
    return RedirectResponse(url, status_code=303)


async def _remember_checkout(
    runtime: Runtime,
    found: CheckoutPlan,
    elicitation_id: str,
    attempt: int,
    customer_id: str,
    checkout_id: str,
    *,
    plan_checkout: bool,
    **detail: str,
) -> None:
    """The write step after Stripe made a Checkout Session: the customer, the link's attempt
    counter (and, for a plan, the session the webhook will match) and an audit row."""
    async with runtime.sessions() as session, session.begin():
        if found.customer_id is None and await session.get(StripeCustomer, found.user_id) is None:
            session.add(StripeCustomer(user_id=found.user_id, customer_id=customer_id))
        row = await session.get(Elicitation, elicitation_id, with_for_update=True)
        if row is not None:
            row.checkout_attempt = max(row.checkout_attempt, attempt)
            if plan_checkout:
                row.checkout_session_id = checkout_id
            session.add(row)
        await record(
            session,
            AuditKind.CHECKOUT_CREATED,
            user_id=found.user_id,
            elicitation_id=elicitation_id,
            checkout=checkout_id,
            **detail,
        )


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
            ttl=timedelta(seconds=runtime.settings.paywall.elicitation_ttl_seconds),
            max_new_per_hour=runtime.settings.paywall.max_elicitations_per_hour,
            metrics=runtime.metrics,
        )
    except RateLimited as exc:
        response = runtime.pages.message("Too many attempts", str(exc).capitalize() + ".", status_code=429)
        response.headers["Retry-After"] = str(exc.retry_after_seconds)
        return response
    return RedirectResponse(f"/pay/{fresh.id}", status_code=303)
