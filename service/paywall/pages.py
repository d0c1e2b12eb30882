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
from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response
from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.sampling import AuditSampler
from service.audit.service import AuditKind, count_recent, record
from service.billing.models import StripeCustomer
from service.billing.plans import Plan, PlanCatalog
from service.billing.redirects import UntrustedRedirect
from service.billing.stripe_fields import field_of
from service.billing.stripe_gateway import CheckoutRequest, CreditCheckoutRequest, StripeGateway
from service.billing.stripe_unavailable import is_transient, stripe_unavailable
from service.billing.subscriptions import entitled_plan_ids, plan_of
from service.db.engine import SessionFactory
from service.db.metadata import utcnow
from service.dependencies import (
    BrowserSessionSecret,
    CatalogDep,
    CheckoutDomain,
    ClientIp,
    CsrfChecked,
    FormPagesDep,
    MetricsDep,
    PageAuditsDep,
    PagesDep,
    PaywallDep,
    SessionDep,
    SessionFactoryDep,
    SettingsDep,
    SignedIn,
    SignedInUser,
    StripeDep,
)
from service.identity.models import User
from service.identity.paths import login_path
from service.identity.service import browser_session_user
from service.paywall.elicitations import RateLimited, is_elicitation_id, restart
from service.paywall.gate import Paywall
from service.paywall.models import Elicitation, ElicitationStatus
from service.settings import Settings
from service.web.forms import FormPages
from service.web.pages import Pages

router = APIRouter(tags=["payment"])
logger = logging.getLogger("service.paywall.pages")

CHECKOUT_MIN_LIFETIME = timedelta(minutes=31)  # Stripe requires at least 30 minutes
CHECKOUT_MAX_LIFETIME = timedelta(hours=23)  # and at most 24 hours
CHECKOUT_WINDOW = timedelta(hours=1)
PAY_ATTEMPT_WINDOW = timedelta(hours=1)
# A subscription in one of these is one the customer pays for, or is about to.
LIVE_STATUSES = frozenset({"active", "trialing", "past_due"})


@dataclass(frozen=True)
class PaymentChecks:
    """What deciding whether this browser may pay for a link, and for which plan, reads and shows."""

    pages: Pages
    form_pages: FormPages
    catalog: PlanCatalog
    paywall: Paywall
    settings: Settings
    client_ip: str | None
    audits: AuditSampler  # which views and refusals get an audit row


async def _payment_checks(
    pages: PagesDep,
    form_pages: FormPagesDep,
    catalog: CatalogDep,
    paywall: PaywallDep,
    settings: SettingsDep,
    client_ip: ClientIp,
    audits: PageAuditsDep,
) -> PaymentChecks:
    return PaymentChecks(pages, form_pages, catalog, paywall, settings, client_ip, audits)


PaymentChecksDep = Annotated[PaymentChecks, Depends(_payment_checks)]


async def _form_expired(request: Request, pages: Pages) -> Response:
    return pages.message(
        "Form expired",
        "Please reload the payment page and try again.",
        status_code=400,
        link_href=f"/pay/{request.path_params['elicitation_id']}",
        link_text="Back to the payment page",
    )


async def _sign_in_to_pay(request: Request, _: Pages) -> Response:
    return RedirectResponse(login_path(f"/pay/{request.path_params['elicitation_id']}"), status_code=303)


# The pay buttons' forms: a failed check shows a page that leads back to the payment page.
PayFormChecked = Depends(CsrfChecked(_form_expired))


async def _sampled(
    checks: PaymentChecks,
    session: AsyncSession,
    kind: AuditKind,
    user_id: str,
    elicitation_id: str,
    *,
    what: str | None = None,
    **detail: str | None,
) -> None:
    """An audit row for the first such event of this user, link and `what`, then one per interval
    with the number of events it stands for: a signed-in user can repeat these as often as they like."""
    count = checks.audits.take((user_id, elicitation_id, kind, what))
    if count is None:
        return
    if what is not None:
        detail["what"] = what
    await record(session, kind, user_id=user_id, elicitation_id=elicitation_id, count=count, **detail)


async def _checked(
    checks: PaymentChecks,
    session: AsyncSession,
    user: User,
    elicitation_id: str,
    *,
    pay_attempt: bool = False,
) -> Elicitation | Response:
    """The elicitation if this browser's user may pay for it, otherwise the page to show instead.

    `pay_attempt`: a press of a pay button, which counts toward its limit even on another
    account's link."""
    pages = checks.pages
    elicitation = (
        await session.get(Elicitation, elicitation_id) if is_elicitation_id(elicitation_id) else None
    )
    if elicitation is None:
        return pages.message(
            "Payment link not found",
            "This payment link does not exist. Call the tool again to get a new one.",
            status_code=404,
        )
    if elicitation.user_id != user.id:
        if pay_attempt:
            refused = await _pay_attempts_exceeded(checks, session, user.id, elicitation.id)
            if refused is not None:
                return refused
        await _sampled(
            checks,
            session,
            AuditKind.IDENTITY_MISMATCH,
            user.id,
            elicitation.id,
            owner=elicitation.user_id,
            client_ip=checks.client_ip,
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
        return checks.form_pages.render(
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
    checks: PaymentChecks,
    session: AsyncSession,
    user: User,
    elicitation_id: str,
    plan_id: str | None = None,
    *,
    pay_attempt: bool = False,
) -> tuple[Elicitation, Plan] | Response:
    """The elicitation and the plan to pay for (its own, or `plan_id` if that also unlocks its
    tool), or the page to show instead."""
    checked = await _checked(checks, session, user, elicitation_id, pay_attempt=pay_attempt)
    if not isinstance(checked, Elicitation):
        return checked
    wanted = plan_id or checked.plan_id
    plan = checks.catalog.get(wanted)
    if (
        plan is not None
        and wanted != checked.plan_id
        and plan not in checks.paywall.plans_for(checked.tool_name)
    ):
        plan = None
    if plan is None:
        return checks.pages.message("Plan unavailable", "This plan is no longer offered.", status_code=410)
    return checked, plan


def _covers(paywall: Paywall, elicitation: Elicitation, plan: Plan, plan_ids: frozenset[str]) -> bool:
    """Whether these plans make paying for `plan` pointless: they include it, or one of them unlocks
    the tool without a limit on calls (a plan whose included calls ran out does not)."""
    if plan.id in plan_ids:
        return True
    for owned in paywall.plans_for(elicitation.tool_name):
        if owned.id in plan_ids and not owned.counts_calls:
            return True
    return False


@router.get("/pay/{elicitation_id}")
async def payment_page(
    elicitation_id: str,
    user: SignedInUser,
    session: SessionDep,
    checks: PaymentChecksDep,
    checkout_domain: CheckoutDomain,
) -> Response:
    payable = await _payable(checks, session, user, elicitation_id)
    if not isinstance(payable, tuple):
        return payable
    checked, plan = payable
    await _sampled(checks, session, AuditKind.PAGE_OPENED, user.id, checked.id)
    grace = timedelta(seconds=checks.settings.billing.past_due_grace_seconds)
    owned = frozenset(await entitled_plan_ids(session, user.id, grace=grace))
    return checks.form_pages.render(
        "pay.html",
        plan=plan,
        # The user has this plan and its included calls are used up: an upgrade or credits help.
        plan_owned=plan.id in owned,
        other_plans=[
            other
            for other in checks.paywall.plans_for(checked.tool_name)
            if other.id != plan.id and other.id not in owned
        ],
        packs=checks.catalog.credit_packs(),
        tool_name=checked.tool_name,
        username=user.username,
        checkout_domain=checkout_domain,
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
    checks: PaymentChecks, session: AsyncSession, user_id: str, elicitation_id: str
) -> Response | None:
    """429 (and a sampled audit row) once the user started `MAX_CHECKOUTS_PER_HOUR` checkouts of any kind."""
    checkouts = await count_recent(session, AuditKind.CHECKOUT_CREATED, user_id, CHECKOUT_WINDOW)
    if checkouts < checks.settings.paywall.max_checkouts_per_hour:
        return None
    await _sampled(checks, session, AuditKind.RATE_LIMITED, user_id, elicitation_id, what="checkout")
    return _too_many(checks.pages, "started too many checkouts in the last hour", CHECKOUT_WINDOW)


def _too_many(pages: Pages, what: str, retry_after: timedelta) -> Response:
    response = pages.message("Too many attempts", f"You {what}. Please try again later.", status_code=429)
    response.headers["Retry-After"] = str(int(retry_after.total_seconds()))
    return response


def _waiting_for_confirmation(pages: Pages) -> Response:
    return pages.message(
        "Payment received, waiting for confirmation",
        "Stripe has your payment and is confirming it to us, usually within seconds. Nothing more to "
        "pay: go back to your MCP client, the tool continues by itself once the confirmation arrives.",
    )


def _untrusted_redirect(pages: Pages) -> Response:
    return pages.message(
        "Payment page unavailable",
        "Stripe answered with an address we do not send browsers to. Nothing was charged; please try "
        "again later.",
        status_code=502,
    )


def _stripe_failed(pages: Pages, elicitation_id: str, exc: stripe.StripeError) -> Response:
    """A page instead of a bare 500 when a pay button's Stripe calls fail; nothing was charged."""
    if is_transient(exc):
        logger.warning("Stripe unavailable for elicitation %s: %s", elicitation_id, type(exc).__name__)
    else:  # not expected: the traceback a 500 would have logged
        logger.exception("Stripe refused a checkout for elicitation %s", elicitation_id)
    return stripe_unavailable(
        pages,
        exc,
        title="Payment page unavailable",
        failed="Nothing was charged: Stripe could not start your checkout",
    )


async def _pay_attempts_exceeded(
    checks: PaymentChecks, session: AsyncSession, user_id: str, elicitation_id: str
) -> Response | None:
    """Count this press of the pay button, or refuse it: per user and per elicitation, before Stripe."""
    settings = checks.settings
    by_user = await count_recent(session, AuditKind.CHECKOUT_ATTEMPT, user_id, PAY_ATTEMPT_WINDOW)
    by_elicitation = await count_recent(
        session, AuditKind.CHECKOUT_ATTEMPT, user_id, PAY_ATTEMPT_WINDOW, elicitation_id=elicitation_id
    )
    if (
        by_user >= settings.paywall.max_pay_attempts_per_user_per_hour
        or by_elicitation >= settings.paywall.max_pay_attempts_per_elicitation_per_hour
    ):
        await _sampled(checks, session, AuditKind.RATE_LIMITED, user_id, elicitation_id, what="pay")
        return _too_many(
            checks.pages, "pressed the pay button too often in the last hour", PAY_ATTEMPT_WINDOW
        )
    await record(session, AuditKind.CHECKOUT_ATTEMPT, user_id=user_id, elicitation_id=elicitation_id)
    return None


async def _read_checkout_plan(
    checks: PaymentChecks,
    sessions: SessionFactory,
    secret: str | None,
    elicitation_id: str,
    plan_id: str | None,
) -> CheckoutPlan | Response:
    """The read step of the pay button, in one short transaction: who, what, whether to go on at all."""
    async with sessions() as session, session.begin():
        user = await browser_session_user(session, secret)
        if user is None:
            return RedirectResponse(login_path(f"/pay/{elicitation_id}"), status_code=303)
        payable = await _payable(checks, session, user, elicitation_id, plan_id, pay_attempt=True)
        if not isinstance(payable, tuple):
            return payable
        elicitation, plan = payable
        refused = await _pay_attempts_exceeded(checks, session, user.id, elicitation.id)
        if refused is not None:
            return refused
        # Fresh from the database, not the paywall's cache: a payment confirmed seconds ago counts.
        grace = timedelta(seconds=checks.settings.billing.past_due_grace_seconds)
        entitled = frozenset(await entitled_plan_ids(session, user.id, grace=grace))
        if _covers(checks.paywall, elicitation, plan, entitled):
            return checks.pages.message(
                "Already subscribed",
                "Your subscription already unlocks this tool; nothing was charged. Return to your MCP "
                "client and call the tool again.",
            )
        if (limited := await _checkouts_exceeded(checks, session, user.id, elicitation.id)) is not None:
            return limited
        customer = await session.get(StripeCustomer, user.id)
        session.expunge(elicitation)
        return CheckoutPlan(
            elicitation, plan, user.id, user.username, customer.customer_id if customer else None
        )


@dataclass(frozen=True)
class NoPaymentYet:
    """Nothing paid or being paid for the chosen plan: a new Checkout Session is due."""

    superseded: str | None = None  # the link's open Checkout Session for another plan, to expire


async def _existing_payment(
    checks: PaymentChecks, gateway: StripeGateway, found: CheckoutPlan
) -> Response | NoPaymentYet:
    """What to do instead of a new Checkout Session, if the user already paid or is paying (Stripe reads)."""
    elicitation = found.elicitation
    superseded = None
    if elicitation.checkout_session_id is not None:
        current = await gateway.retrieve_checkout_session(elicitation.checkout_session_id)
        if field_of(field_of(current, "metadata"), "plan_id") in (None, found.plan.id):
            if current.status == "complete":
                return _waiting_for_confirmation(checks.pages)
            if current.status == "open" and current.url:
                return RedirectResponse(gateway.checkout_url(current), status_code=303)
        elif current.status == "open":
            superseded = current.id  # for another plan than the one chosen now: replaced below
    if found.customer_id is None:
        return NoPaymentYet(superseded)
    live_plans = {
        plan_id
        for subscription in await gateway.list_subscriptions(found.customer_id)
        if field_of(subscription, "status") in LIVE_STATUSES
        and (plan_id := plan_of(subscription, checks.catalog)) is not None
    }
    if _covers(checks.paywall, elicitation, found.plan, frozenset(live_plans)):
        return _waiting_for_confirmation(checks.pages)  # paid, the webhook has not told us yet
    if live_plans:
        # A second subscription would bill twice: change the plan of the one there is instead.
        url = await gateway.create_portal_session(
            found.customer_id, return_url=f"{checks.settings.http.public_base_url}/pay/{elicitation.id}"
        )
        return RedirectResponse(url, status_code=303)
    return NoPaymentYet(superseded)


async def _expire_superseded(gateway: StripeGateway, elicitation_id: str, checkout_id: str) -> None:
    """Expire the checkout a new one for another plan replaced, so the user cannot pay for both.

    Called once the link names the new checkout, so the old one's `checkout.session.expired`
    webhook no longer matches the link and leaves it open. A failure only leaves the old
    checkout to run out by itself; the new one is already the link's."""
    try:
        await gateway.expire_checkout_session(checkout_id)
    except stripe.StripeError as exc:
        logger.warning(
            "could not expire checkout %s replaced for elicitation %s: %s",
            checkout_id,
            elicitation_id,
            type(exc).__name__,
        )


@router.post("/pay/{elicitation_id}", dependencies=[PayFormChecked])
async def start_checkout(
    elicitation_id: str,
    checks: PaymentChecksDep,
    sessions: SessionFactoryDep,
    secret: BrowserSessionSecret,
    gateway: StripeDep,
    metrics: MetricsDep,
    plan_id: Annotated[str | None, Form(max_length=64)] = None,
) -> Response:
    """Read (a short transaction), then Stripe (no transaction held), then write (a short transaction).

    `plan_id`: another plan that unlocks the tool, chosen on the page instead of the link's own."""
    found = await _read_checkout_plan(checks, sessions, secret, elicitation_id, plan_id)
    if not isinstance(found, CheckoutPlan):
        return found
    elicitation = found.elicitation
    try:
        instead = await _existing_payment(checks, gateway, found)
        if not isinstance(instead, NoPaymentYet):
            return instead
        customer_id = found.customer_id or await gateway.create_customer(found.user_id, found.username)
        now = utcnow()
        lifetime = min(max(elicitation.expires_at - now, CHECKOUT_MIN_LIFETIME), CHECKOUT_MAX_LIFETIME)
        attempt = elicitation.checkout_attempt + 1
        base = checks.settings.http.public_base_url
        checkout = await gateway.create_checkout_session(
            CheckoutRequest(
                customer_id=customer_id,
                price_id=await gateway.price_id(found.plan),
                metered_price_ids=tuple(
                    [
                        await gateway.price_id(metered)
                        for metered in checks.catalog.metered_prices_of(found.plan)
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
        return _untrusted_redirect(checks.pages)
    except stripe.IdempotencyError:
        # Two presses at once made the same request with different expiry times; the other one won.
        return RedirectResponse(f"/pay/{elicitation.id}", status_code=303)
    except stripe.StripeError as exc:
        return _stripe_failed(checks.pages, elicitation.id, exc)

    await _remember_checkout(
        sessions, found, elicitation.id, attempt, customer_id, checkout.id, plan_checkout=True
    )
    if instead.superseded is not None and instead.superseded != checkout.id:
        await _expire_superseded(gateway, elicitation.id, instead.superseded)
    metrics.checkout_created(found.plan.id)
    return RedirectResponse(url, status_code=303)


async def _read_credit_checkout(
    checks: PaymentChecks, sessions: SessionFactory, secret: str | None, elicitation_id: str
) -> CheckoutPlan | Response:
    """The read step of a credit pack's button: who, for which link, whether to go on at all."""
    async with sessions() as session, session.begin():
        user = await browser_session_user(session, secret)
        if user is None:
            return RedirectResponse(login_path(f"/pay/{elicitation_id}"), status_code=303)
        payable = await _payable(checks, session, user, elicitation_id, pay_attempt=True)
        if not isinstance(payable, tuple):
            return payable
        elicitation, plan = payable
        refused = await _pay_attempts_exceeded(checks, session, user.id, elicitation.id)
        if refused is not None:
            return refused
        if (limited := await _checkouts_exceeded(checks, session, user.id, elicitation.id)) is not None:
            return limited
        customer = await session.get(StripeCustomer, user.id)
        session.expunge(elicitation)
        return CheckoutPlan(
            elicitation, plan, user.id, user.username, customer.customer_id if customer else None
        )


@router.post("/pay/{elicitation_id}/credits", dependencies=[PayFormChecked])
async def buy_credits(
    elicitation_id: str,
    checks: PaymentChecksDep,
    sessions: SessionFactoryDep,
    secret: BrowserSessionSecret,
    gateway: StripeDep,
    pack_id: Annotated[str | None, Form(max_length=64)] = None,
) -> Response:
    """Checkout in payment mode for a credit pack: read, then Stripe (no transaction held), then write."""
    pack = checks.catalog.credit_pack(pack_id or "")
    if pack is None:
        return checks.pages.message(
            "Credit pack unavailable", "This credit pack is not offered.", status_code=404
        )
    found = await _read_credit_checkout(checks, sessions, secret, elicitation_id)
    if not isinstance(found, CheckoutPlan):
        return found
    elicitation = found.elicitation
    attempt = elicitation.checkout_attempt + 1
    try:
        customer_id = found.customer_id or await gateway.create_customer(found.user_id, found.username)
        base = checks.settings.http.public_base_url
        checkout = await gateway.create_credit_checkout_session(
            CreditCheckoutRequest(
                customer_id=customer_id,
                price_id=await gateway.price_id(pack),
                user_id=found.user_id,
                elicitation_id=elicitation.id,
                pack=pack,
                success_url=f"{base}/pay/{elicitation.id}/success?session_id={{CHECKOUT_SESSION_ID}}",
                cancel_url=f"{base}/pay/{elicitation.id}/cancel",
                expires_at=int((utcnow() + CHECKOUT_MIN_LIFETIME).timestamp()),
                idempotency_key=f"credits:{elicitation.id}:{pack.id}:{attempt}",
            )
        )
        url = gateway.checkout_url(checkout)
    except UntrustedRedirect:
        logger.exception("refused a redirect from Stripe for elicitation %s", elicitation.id)
        return _untrusted_redirect(checks.pages)
    except stripe.IdempotencyError:
        return RedirectResponse(f"/pay/{elicitation.id}", status_code=303)
    except stripe.StripeError as exc:
        return _stripe_failed(checks.pages, elicitation.id, exc)

    await _remember_checkout(
        sessions,
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
    sessions: SessionFactory,
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
    async with sessions() as session, session.begin():
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
async def checkout_success(elicitation_id: str, pages: PagesDep) -> Response:
    # Deliberately confirms nothing: only the signed webhook grants access.
    return pages.message(
        "Thanks! Waiting for Stripe's confirmation",
        "Stripe will confirm your payment to us directly, usually within seconds. Go back to your MCP "
        "client: the tool continues by itself once the confirmation arrives, or call it again.",
    )


@router.get("/pay/{elicitation_id}/cancel")
async def checkout_cancelled(elicitation_id: str, pages: PagesDep) -> Response:
    return pages.message(
        "No payment made",
        "You left the checkout and nothing was charged.",
        link_href=f"/pay/{elicitation_id}",
        link_text="Back to the payment page",
    )


@router.post("/pay/{elicitation_id}/restart", dependencies=[Depends(CsrfChecked(_sign_in_to_pay))])
async def restart_expired(
    elicitation_id: str,
    user: Annotated[User, Depends(SignedIn(return_to="/pay/{elicitation_id}"))],
    session: SessionDep,
    checks: PaymentChecksDep,
    metrics: MetricsDep,
) -> Response:
    """A fresh elicitation in place of an expired one, owed to the same MCP sessions."""
    old = await session.get(Elicitation, elicitation_id) if is_elicitation_id(elicitation_id) else None
    expired = old is not None and (
        old.status == ElicitationStatus.EXPIRED.value
        or (old.status == ElicitationStatus.OPEN.value and old.expires_at <= utcnow())
    )
    if old is None or old.user_id != user.id or not expired:
        checked = await _checked(checks, session, user, elicitation_id)  # the same refusals
        if isinstance(checked, Elicitation):
            return RedirectResponse(f"/pay/{elicitation_id}", status_code=303)
        return checked
    try:
        fresh = await restart(
            session,
            old,
            ttl=timedelta(seconds=checks.settings.paywall.elicitation_ttl_seconds),
            max_new_per_hour=checks.settings.paywall.max_elicitations_per_hour,
            metrics=metrics,
        )
    except RateLimited as exc:
        response = checks.pages.message("Too many attempts", str(exc).capitalize() + ".", status_code=429)
        response.headers["Retry-After"] = str(exc.retry_after_seconds)
        return response
    return RedirectResponse(f"/pay/{fresh.id}", status_code=303)
