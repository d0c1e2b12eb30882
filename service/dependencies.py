"""FastAPI dependencies by purpose: each endpoint asks for what it uses, and nothing more.

Every getter reads one thing the lifespan created (`Runtime`, service/runtime.py). The few plain
Starlette routes (/register, /token, Stripe's webhook) await the same getters with their request.
Dependencies that refuse a request raise `ResponseInstead`; the app answers with its response.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Form, Request
from fastapi.responses import RedirectResponse, Response
from sqlmodel.ext.asyncio.session import AsyncSession

from service.audit.sampling import AuditSampler
from service.billing.plans import PlanCatalog
from service.billing.stripe_gateway import StripeGateway
from service.billing.stripe_sync.processor import WebhookProcessor
from service.billing.stripe_sync.verification import WebhookChecks
from service.db.engine import SessionFactory
from service.health.readiness import Readiness
from service.identity import service as identity
from service.identity.models import User
from service.identity.oauth_provider import DatabaseOAuthProvider
from service.identity.oidc.login import OidcLogin
from service.identity.paths import login_path, safe_next_path
from service.identity.sign_in import PasswordSignIn
from service.identity.throttle import AddressRateLimiter
from service.observability.metrics import ServiceMetrics
from service.paywall.gate import Paywall
from service.runtime import Runtime
from service.settings import Settings
from service.web.client_address import ClientAddresses
from service.web.cookies import SESSION_COOKIE, CookiePolicy
from service.web.csrf import CsrfProtect
from service.web.forms import FormPages
from service.web.pages import Pages


class ResponseInstead(Exception):
    """Raised by a dependency to answer the request with `response` instead of running the endpoint."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


async def respond_instead(_: Request, exc: Exception) -> Response:
    """The app's exception handler for `ResponseInstead`."""
    assert isinstance(exc, ResponseInstead)
    return exc.response


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


# Async, every one: FastAPI runs a plain `def` dependency in a worker thread.
async def get_settings(request: Request) -> Settings:
    return _runtime(request).settings


async def get_session_factory(request: Request) -> SessionFactory:
    return _runtime(request).sessions


async def get_pages(request: Request) -> Pages:
    return _runtime(request).pages


async def get_cookies(request: Request) -> CookiePolicy:
    return _runtime(request).cookies


async def get_csrf(request: Request) -> CsrfProtect:
    return _runtime(request).csrf


async def get_readiness(request: Request) -> Readiness:
    return _runtime(request).readiness


async def get_catalog(request: Request) -> PlanCatalog:
    return _runtime(request).catalog


async def get_stripe(request: Request) -> StripeGateway:
    return _runtime(request).stripe


async def get_checkout_domain(request: Request) -> str:
    """Where the payment page says Checkout happens: Stripe's domain, or the built-in sandbox."""
    return _runtime(request).checkout_domain


async def get_paywall(request: Request) -> Paywall:
    return _runtime(request).paywall


async def get_metrics(request: Request) -> ServiceMetrics:
    return _runtime(request).metrics


async def get_oauth(request: Request) -> DatabaseOAuthProvider:
    return _runtime(request).oauth


async def get_oidc(request: Request) -> OidcLogin | None:
    """The external provider's sign-in, when OIDC_ISSUER names one; None when we sign people in."""
    return _runtime(request).oidc


async def get_sign_in(request: Request) -> PasswordSignIn:
    return _runtime(request).sign_in


async def get_registration_limiter(request: Request) -> AddressRateLimiter:
    return _runtime(request).registration_limiter


async def get_client_addresses(request: Request) -> ClientAddresses:
    return _runtime(request).client_addresses


async def get_webhook_processor(request: Request) -> WebhookProcessor:
    return _runtime(request).webhooks


async def get_webhook_checks(request: Request) -> WebhookChecks:
    return _runtime(request).webhook_checks


async def get_webhook_rejections(request: Request) -> AuditSampler:
    """Samples which rejected webhooks get an audit row."""
    return _runtime(request).webhook_rejections


async def get_page_audits(request: Request) -> AuditSampler:
    """Samples which payment page views and refusals, and refused billing portal presses, get an audit row."""
    return _runtime(request).page_audits


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionFactoryDep = Annotated[SessionFactory, Depends(get_session_factory)]
PagesDep = Annotated[Pages, Depends(get_pages)]
CookiesDep = Annotated[CookiePolicy, Depends(get_cookies)]
CsrfDep = Annotated[CsrfProtect, Depends(get_csrf)]
ReadinessDep = Annotated[Readiness, Depends(get_readiness)]
CatalogDep = Annotated[PlanCatalog, Depends(get_catalog)]
StripeDep = Annotated[StripeGateway, Depends(get_stripe)]
CheckoutDomain = Annotated[str, Depends(get_checkout_domain)]
PaywallDep = Annotated[Paywall, Depends(get_paywall)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]
OAuthDep = Annotated[DatabaseOAuthProvider, Depends(get_oauth)]
OidcDep = Annotated[OidcLogin | None, Depends(get_oidc)]
SignInDep = Annotated[PasswordSignIn, Depends(get_sign_in)]
WebhookProcessorDep = Annotated[WebhookProcessor, Depends(get_webhook_processor)]
PageAuditsDep = Annotated[AuditSampler, Depends(get_page_audits)]


async def get_client_ip(
    request: Request, addresses: Annotated[ClientAddresses, Depends(get_client_addresses)]
) -> str | None:
    """The client's address as throttling and audit rows know it (see service/web/client_address.py)."""
    return addresses.of(request.scope)


ClientIp = Annotated[str | None, Depends(get_client_ip)]


async def get_form_pages(request: Request, pages: PagesDep, csrf: CsrfDep) -> FormPages:
    return FormPages(request, pages, csrf)


FormPagesDep = Annotated[FormPages, Depends(get_form_pages)]


async def get_session(sessions: SessionFactoryDep) -> AsyncIterator[AsyncSession]:
    """One transaction per request: committed when the endpoint returns, rolled back if it raises."""
    async with sessions() as session, session.begin():
        yield session


# scope="function": commit before the response leaves, so a client that follows a redirect at once
# (a browser after login, a second press of the pay button) always sees what this request wrote.
SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]


async def get_browser_session_secret(request: Request, cookies: CookiesDep) -> str | None:
    """The browser session cookie's value, if the request carries one."""
    return request.cookies.get(cookies.name(SESSION_COOKIE))


BrowserSessionSecret = Annotated[str | None, Depends(get_browser_session_secret)]


async def get_optional_user(session: SessionDep, secret: BrowserSessionSecret) -> User | None:
    return await identity.browser_session_user(session, secret)


# For a page that serves signed-in and signed-out browsers alike; others ask for `SignedInUser`.
OptionalUser = Annotated[User | None, Depends(get_optional_user)]


def sign_in_redirect(return_to: str | None) -> ResponseInstead:
    """Send the browser to sign in, then back to `return_to` if that is a path on this site."""
    next_path = safe_next_path(return_to)
    return ResponseInstead(
        RedirectResponse(login_path(next_path) if next_path else "/login", status_code=303)
    )


class SignedIn:
    """Dependency: the browser's signed-in user; without one, a redirect (303) to the sign-in page
    that returns to `return_to` (a path formatted with the request's path parameters), by default
    to the path requested."""

    def __init__(self, return_to: str | None = None) -> None:
        self.return_to = return_to

    async def __call__(self, request: Request, user: OptionalUser) -> User:
        if user is None:
            path = (
                request.url.path if self.return_to is None else self.return_to.format_map(request.path_params)
            )
            raise sign_in_redirect(path)
        return user


SignedInUser = Annotated[User, Depends(SignedIn())]


async def get_csrf_valid(
    request: Request, csrf: CsrfDep, csrf_token: Annotated[str | None, Form()] = None
) -> bool:
    """Whether the form's `csrf_token` field matches the request's CSRF cookie."""
    return csrf.verify(request, csrf_token)


CsrfValid = Annotated[bool, Depends(get_csrf_valid)]


class CsrfChecked:
    """Dependency of a form's POST handler: passes when the form's CSRF token is valid, otherwise
    answers with `refusal(request, pages)` and the handler does not run."""

    def __init__(self, refusal: Callable[[Request, Pages], Awaitable[Response]]) -> None:
        self.refusal = refusal

    async def __call__(self, request: Request, valid: CsrfValid, pages: PagesDep) -> None:
        if not valid:
            raise ResponseInstead(await self.refusal(request, pages))
