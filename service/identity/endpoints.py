"""The browser side of identity: the login form, OAuth consent, logout.

A successful login sets the browser session cookie that later proves who opens a payment page,
then either goes on to the consent page of an OAuth authorization (`authz`) or returns to a
local page (`next`). Codes are issued only from the consent page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from mcp.server.auth.middleware.client_auth import AuthenticationError

from service.dependencies import (
    BrowserSessionSecret,
    ClientIp,
    CookiesDep,
    CsrfChecked,
    CsrfValid,
    FormPagesDep,
    OAuthDep,
    OidcDep,
    OptionalUser,
    PagesDep,
    ResponseInstead,
    SessionDep,
    SettingsDep,
    SignedInUser,
    SignInDep,
)
from service.identity import service as identity
from service.identity.client_auth import HashedSecretAuthenticator
from service.identity.client_registration import redirect_uri_problem
from service.identity.known_device import DEVICE_COOKIE
from service.identity.models import User
from service.identity.oauth_forms import UnreadableForm, invalid_request, read_form
from service.identity.oauth_provider import MAX_AUTHZ_LENGTH, DatabaseOAuthProvider, PendingAuthorization
from service.identity.oidc.login import OidcLogin
from service.identity.paths import consent_path, safe_next_path
from service.identity.sign_in import SignInRefused
from service.web.cookies import SESSION_COOKIE
from service.web.forms import FormPages
from service.web.pages import Pages

router = APIRouter(tags=["identity"])

OptionalForm = Annotated[str | None, Form()]


@dataclass(frozen=True)
class LoginRequest:
    """What the login form carries besides the credentials: where to go after signing in."""

    authz: str | None  # an OAuth authorization waiting for this sign-in, sealed
    pending: PendingAuthorization | None  # `authz` opened
    next_path: str | None  # a local page to return to


def _login_request(
    oidc: OidcLogin | None, oauth: DatabaseOAuthProvider, pages: Pages, authz: str | None, next: str | None
) -> LoginRequest:
    """The login request, or else (raised) the external provider's sign-in or the expired-link page."""
    if oidc is not None:  # an external provider signs people in
        raise ResponseInstead(oidc.start(safe_next_path(next) or "/account"))
    pending = oauth.open_pending(authz) if authz else None
    if authz and pending is None:
        raise ResponseInstead(_expired_authorization(pages))
    return LoginRequest(authz, pending, safe_next_path(next))


async def _login_asked(
    oidc: OidcDep,
    oauth: OAuthDep,
    pages: PagesDep,
    authz: Annotated[str | None, Query(max_length=MAX_AUTHZ_LENGTH)] = None,
    next: str | None = None,
) -> LoginRequest:
    return _login_request(oidc, oauth, pages, authz, next)


async def _login_posted(
    oidc: OidcDep,
    oauth: OAuthDep,
    pages: PagesDep,
    form_pages: FormPagesDep,
    csrf_valid: CsrfValid,
    authz: Annotated[str | None, Form(max_length=MAX_AUTHZ_LENGTH)] = None,
    next: OptionalForm = None,
) -> LoginRequest:
    """As `_login_asked`, then the CSRF check: a failed one shows the form again."""
    login = _login_request(oidc, oauth, pages, authz, next)
    if not csrf_valid:
        raise ResponseInstead(
            _login_page(form_pages, login, error="Your form expired. Please sign in again.", status_code=400)
        )
    return login


def _login_page(
    form_pages: FormPages,
    login: LoginRequest,
    *,
    error: str | None = None,
    username: str | None = None,
    status_code: int = 200,
) -> Response:
    pending = login.pending
    return form_pages.render(
        "login.html",
        status_code=status_code,
        authz=login.authz,
        next_path=login.next_path,
        client_name=(pending.client_name or pending.client_id) if pending else None,
        error=error,
        username=username,
    )


def _expired_authorization(pages: Pages) -> Response:
    return pages.message(
        "Sign-in link expired",
        "This sign-in request is invalid or has expired. Start again from your MCP client.",
        status_code=400,
    )


@router.get("/login")
async def login_form(
    login: Annotated[LoginRequest, Depends(_login_asked)], user: OptionalUser, form_pages: FormPagesDep
) -> Response:
    if user is not None and login.authz and login.pending is not None:
        return RedirectResponse(consent_path(login.authz), status_code=303)
    if user is not None and login.next_path is not None:
        return RedirectResponse(login.next_path, status_code=303)
    return _login_page(form_pages, login)


@router.post("/login")
async def login_submit(
    login: Annotated[LoginRequest, Depends(_login_posted)],
    sign_in: SignInDep,
    client_ip: ClientIp,
    form_pages: FormPagesDep,
    settings: SettingsDep,
    cookies: CookiesDep,
    session: SessionDep,
    previous: BrowserSessionSecret,
    username: Annotated[str, Form(max_length=150)],
    password: Annotated[str, Form(max_length=1024)],
    request: Request,
) -> Response:
    device_cookie = request.cookies.get(cookies.name(DEVICE_COOKIE))
    try:
        user = await sign_in.attempt(username, password, client_ip, device_cookie)
    except SignInRefused as refused:
        page = _login_page(
            form_pages,
            login,
            error="Too many failed sign-ins. Wait a moment, then try again."
            if refused.throttled
            else "Sign-in is busy. Wait a moment, then try again.",
            username=username,
            status_code=429 if refused.throttled else 503,
        )
        page.headers["Retry-After"] = str(refused.retry_after_seconds)
        return page
    if user is None:
        return _login_page(
            form_pages, login, error="Wrong username or password.", username=username, status_code=401
        )
    ttl = settings.identity.browser_session_ttl_seconds
    secret = await identity.start_browser_session(
        session,
        user,
        timedelta(seconds=ttl),
        replaces=previous,
        max_live=settings.identity.max_browser_sessions_per_user,
    )
    # Signing in is not consenting: an authorization goes on to the consent page.
    target = (
        consent_path(login.authz)
        if login.authz and login.pending is not None
        else login.next_path or "/account"
    )
    response = RedirectResponse(target, status_code=303)
    cookies.set(response, SESSION_COOKIE, secret, max_age=ttl)
    # This browser is now known for this account: others' failures no longer lock it out.
    devices = sign_in.devices
    cookies.set(response, DEVICE_COOKIE, devices.issue(username), max_age=devices.max_age_seconds)
    return response


@dataclass(frozen=True)
class Authorization:
    """An OAuth authorization waiting for the user's consent: sealed, and opened."""

    authz: str
    pending: PendingAuthorization


def _opened(oauth: DatabaseOAuthProvider, pages: Pages, authz: str) -> Authorization:
    pending = oauth.open_pending(authz)
    if pending is None:
        raise ResponseInstead(_expired_authorization(pages))
    return Authorization(authz, pending)


async def _consent_asked(
    oauth: OAuthDep, pages: PagesDep, authz: Annotated[str, Query(max_length=MAX_AUTHZ_LENGTH)]
) -> Authorization:
    return _opened(oauth, pages, authz)


async def _consent_answered(
    oauth: OAuthDep, pages: PagesDep, authz: Annotated[str, Form(max_length=MAX_AUTHZ_LENGTH)]
) -> Authorization:
    return _opened(oauth, pages, authz)


AskedConsent = Annotated[Authorization, Depends(_consent_asked)]
AnsweredConsent = Annotated[Authorization, Depends(_consent_answered)]


async def _consenting_user(asked: AskedConsent, user: OptionalUser) -> User:
    """The signed-in user; without one, sign in first, for this authorization (which names the app)."""
    if user is None:
        raise ResponseInstead(
            RedirectResponse("/login?" + urlencode({"authz": asked.authz}), status_code=303)
        )
    return user


async def _answering_user(answered: AnsweredConsent, user: OptionalUser) -> User:
    """The signed-in user; without one, back to the consent page, which asks to sign in."""
    if user is None:
        raise ResponseInstead(RedirectResponse(consent_path(answered.authz), status_code=303))
    return user


async def _back_to_consent(request: Request, pages: Pages) -> Response:
    try:
        authz = (await read_form(request)).get("authz")
    except UnreadableForm:
        return _expired_authorization(pages)
    if isinstance(authz, str) and len(authz) > MAX_AUTHZ_LENGTH:  # never copied into a Location header
        return _expired_authorization(pages)
    return RedirectResponse(consent_path(authz if isinstance(authz, str) else ""), status_code=303)


def _refused_redirect(pages: Pages, pending: PendingAuthorization) -> Response:
    """A client registered before redirect URIs were checked may not send codes anywhere unsafe."""
    return pages.message(
        "Application not allowed",
        f"{pending.client_name or pending.client_id} asks to receive your authorization at "
        f"{pending.redirect_uri}, which this service does not send authorizations to.",
        status_code=400,
    )


def _consent_page(form_pages: FormPages, refresh_days: int, asked: Authorization, user: User) -> Response:
    pending = asked.pending
    return form_pages.render(
        "consent.html",
        authz=asked.authz,
        username=user.username,
        client_name=pending.client_name,
        client_id=pending.client_id,
        redirect_host=pending.redirect_host,
        redirect_uri=pending.redirect_uri,
        scopes=pending.params.scopes or [],
        refresh_days=refresh_days,
        switch_user_path="/login?" + urlencode({"authz": asked.authz}),
    )


@router.get("/authorize/consent")
async def consent_form(
    asked: AskedConsent,
    user: Annotated[User, Depends(_consenting_user)],
    oauth: OAuthDep,
    pages: PagesDep,
    form_pages: FormPagesDep,
    settings: SettingsDep,
    session: SessionDep,
) -> Response:
    """Every authorization passes here after sign-in; only a remembered approval skips the question."""
    pending = asked.pending
    if redirect_uri_problem(pending.params.redirect_uri) is not None:
        return _refused_redirect(pages, pending)
    if await oauth.consent_remembered(session, pending, user):
        target = await oauth.complete_authorization(session, pending, user)
        return RedirectResponse(target, status_code=303)
    refresh_days = max(1, settings.identity.refresh_token_ttl_seconds // 86400)
    return _consent_page(form_pages, refresh_days, asked, user)


@router.post("/authorize/consent")
async def consent_submit(
    answered: AnsweredConsent,
    user: Annotated[User, Depends(_answering_user)],
    _csrf: Annotated[None, Depends(CsrfChecked(_back_to_consent))],  # after the two above, as it was
    oauth: OAuthDep,
    pages: PagesDep,
    session: SessionDep,
    decision: Annotated[str, Form(max_length=16)],
) -> Response:
    pending = answered.pending
    if redirect_uri_problem(pending.params.redirect_uri) is not None:
        return _refused_redirect(pages, pending)
    if decision != "allow":
        return RedirectResponse(oauth.denied_redirect(pending), status_code=303)
    await oauth.remember_consent(session, pending, user)
    target = await oauth.complete_authorization(session, pending, user)
    return RedirectResponse(target, status_code=303)


async def _sign_out_failed(_: Request, pages: Pages) -> Response:
    return pages.message("Sign out failed", "Your form expired. Reload and try again.", status_code=400)


@router.post("/logout", dependencies=[Depends(CsrfChecked(_sign_out_failed))])
async def logout(
    session: SessionDep, secret: BrowserSessionSecret, cookies: CookiesDep, next: OptionalForm = None
) -> Response:
    await identity.end_browser_session(session, secret)
    response = RedirectResponse(safe_next_path(next) or "/login", status_code=303)
    cookies.clear(response, SESSION_COOKIE)
    return response


@router.get("/account")
async def account(user: SignedInUser, pages: PagesDep) -> Response:
    return pages.message("Signed in", f"You are signed in as {user.username}.")


@router.post("/revoke")
async def revoke(request: Request, oidc: OidcDep, oauth: OAuthDep) -> Response:
    """RFC 7009 revocation, served ahead of the SDK's handler.

    The SDK's handler insists on a `client_secret` field even from public clients, which RFC 7009
    does not ask of them; client authentication itself is still the SDK's.
    """
    if oidc is not None:  # tokens come from the external issuer: revoke them there
        return JSONResponse({"error": "not_found"}, status_code=404)
    try:  # before authenticating, which reads the form Starlette keeps from this read
        form = await read_form(request)
    except UnreadableForm as unreadable:
        return invalid_request(unreadable)
    try:
        client = await HashedSecretAuthenticator(oauth).authenticate_request(request)
    except AuthenticationError as exc:
        return JSONResponse({"error": "invalid_client", "error_description": exc.message}, status_code=401)
    token = form.get("token")
    if not isinstance(token, str) or not token:
        return JSONResponse(
            {"error": "invalid_request", "error_description": "token is required"}, status_code=400
        )
    found = await oauth.load_access_token(token) or await oauth.load_refresh_token(client, token)
    if found is not None and found.client_id == client.client_id:
        await oauth.revoke_token(found)
    # Unknown or foreign tokens get the same answer, so revocation cannot probe for valid tokens.
    return Response(status_code=200, headers={"Cache-Control": "no-store"})
