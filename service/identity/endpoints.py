"""The browser side of identity: the login form, OAuth consent, logout.

A successful login sets the browser session cookie that later proves who opens a payment page,
then either goes on to the consent page of an OAuth authorization (`authz`) or returns to a
local page (`next`). Codes are issued only from the consent page.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from mcp.server.auth.middleware.client_auth import AuthenticationError

from service.dependencies import BrowserUser, RuntimeDep, SessionDep
from service.identity import service as identity
from service.identity.client_auth import HashedSecretAuthenticator
from service.identity.client_registration import redirect_uri_problem
from service.identity.models import User
from service.identity.oauth_provider import PendingAuthorization
from service.identity.sign_in import SignInRefused
from service.runtime import Runtime
from service.web.cookies import SESSION_COOKIE

router = APIRouter(tags=["identity"])

OptionalForm = Annotated[str | None, Form()]


def safe_next_path(value: str | None) -> str | None:
    """Only same-origin absolute paths: an open redirect here would be a phishing tool."""
    if value and value.startswith("/") and not value.startswith(("//", "/\\")):
        return value
    return None


def login_path(next_path: str) -> str:
    return "/login?" + urlencode({"next": next_path})


def consent_path(authz: str) -> str:
    return "/authorize/consent?" + urlencode({"authz": authz})


def _login_page(
    runtime: Runtime,
    request: Request,
    *,
    authz: str | None,
    pending: PendingAuthorization | None,
    next_path: str | None,
    error: str | None = None,
    username: str | None = None,
    status_code: int = 200,
) -> Response:
    return runtime.form_page(
        request,
        "login.html",
        status_code=status_code,
        authz=authz,
        next_path=next_path,
        client_name=(pending.client_name or pending.client_id) if pending else None,
        error=error,
        username=username,
    )


def _expired_authorization(runtime: Runtime) -> Response:
    return runtime.pages.message(
        "Sign-in link expired",
        "This sign-in request is invalid or has expired. Start again from your MCP client.",
        status_code=400,
    )


@router.get("/login")
async def login_form(
    request: Request,
    runtime: RuntimeDep,
    user: BrowserUser,
    authz: str | None = None,
    next: str | None = None,
) -> Response:
    if runtime.oidc is not None:  # an external provider signs people in
        return runtime.oidc.start(safe_next_path(next) or "/account")
    pending = runtime.oauth.open_pending(authz) if authz else None
    if authz and pending is None:
        return _expired_authorization(runtime)
    next_path = safe_next_path(next)
    if user is not None and authz and pending is not None:
        return RedirectResponse(consent_path(authz), status_code=303)
    if user is not None and next_path is not None:
        return RedirectResponse(next_path, status_code=303)
    return _login_page(runtime, request, authz=authz, pending=pending, next_path=next_path)


@router.post("/login")
async def login_submit(
    request: Request,
    runtime: RuntimeDep,
    session: SessionDep,
    username: Annotated[str, Form(max_length=150)],
    password: Annotated[str, Form(max_length=1024)],
    csrf_token: OptionalForm = None,
    authz: OptionalForm = None,
    next: OptionalForm = None,
) -> Response:
    if runtime.oidc is not None:  # no passwords here: the external provider signs people in
        return runtime.oidc.start(safe_next_path(next) or "/account")
    pending = runtime.oauth.open_pending(authz) if authz else None
    if authz and pending is None:
        return _expired_authorization(runtime)
    next_path = safe_next_path(next)
    if not runtime.csrf.verify(request, csrf_token):
        return _login_page(
            runtime,
            request,
            authz=authz,
            pending=pending,
            next_path=next_path,
            error="Your form expired. Please sign in again.",
            status_code=400,
        )
    try:
        user = await runtime.sign_in.attempt(username, password, runtime.client_ip(request))
    except SignInRefused as refused:
        page = _login_page(
            runtime,
            request,
            authz=authz,
            pending=pending,
            next_path=next_path,
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
            runtime,
            request,
            authz=authz,
            pending=pending,
            next_path=next_path,
            error="Wrong username or password.",
            username=username,
            status_code=401,
        )
    ttl = runtime.settings.identity.browser_session_ttl_seconds
    secret = await identity.start_browser_session(session, user, timedelta(seconds=ttl))
    # Signing in is not consenting: an authorization goes on to the consent page.
    target = consent_path(authz) if authz and pending is not None else next_path or "/account"
    response = RedirectResponse(target, status_code=303)
    runtime.cookies.set(response, SESSION_COOKIE, secret, max_age=ttl)
    return response


def _refused_redirect(runtime: Runtime, pending: PendingAuthorization) -> Response:
    """A client registered before redirect URIs were checked may not send codes anywhere unsafe."""
    return runtime.pages.message(
        "Application not allowed",
        f"{pending.client_name or pending.client_id} asks to receive your authorization at "
        f"{pending.redirect_uri}, which this service does not send authorizations to.",
        status_code=400,
    )


def _consent_page(
    runtime: Runtime, request: Request, authz: str, pending: PendingAuthorization, user: User
) -> Response:
    refresh_days = max(1, runtime.settings.identity.refresh_token_ttl_seconds // 86400)
    return runtime.form_page(
        request,
        "consent.html",
        authz=authz,
        username=user.username,
        client_name=pending.client_name,
        client_id=pending.client_id,
        redirect_host=pending.redirect_host,
        redirect_uri=pending.redirect_uri,
        scopes=pending.params.scopes or [],
        refresh_days=refresh_days,
        switch_user_path="/login?" + urlencode({"authz": authz}),
    )


@router.get("/authorize/consent")
async def consent_form(
    request: Request,
    runtime: RuntimeDep,
    session: SessionDep,
    user: BrowserUser,
    authz: Annotated[str, Query(max_length=8192)],
) -> Response:
    """Every authorization passes here after sign-in; only a remembered approval skips the question."""
    pending = runtime.oauth.open_pending(authz)
    if pending is None:
        return _expired_authorization(runtime)
    if user is None:
        return RedirectResponse("/login?" + urlencode({"authz": authz}), status_code=303)
    if redirect_uri_problem(pending.params.redirect_uri) is not None:
        return _refused_redirect(runtime, pending)
    if await runtime.oauth.consent_remembered(session, pending, user):
        target = await runtime.oauth.complete_authorization(session, pending, user)
        return RedirectResponse(target, status_code=303)
    return _consent_page(runtime, request, authz, pending, user)


@router.post("/authorize/consent")
async def consent_submit(
    request: Request,
    runtime: RuntimeDep,
    session: SessionDep,
    user: BrowserUser,
    authz: Annotated[str, Form(max_length=8192)],
    decision: Annotated[str, Form(max_length=16)],
    csrf_token: OptionalForm = None,
) -> Response:
    pending = runtime.oauth.open_pending(authz)
    if pending is None:
        return _expired_authorization(runtime)
    if user is None or not runtime.csrf.verify(request, csrf_token):
        return RedirectResponse(consent_path(authz), status_code=303)
    if redirect_uri_problem(pending.params.redirect_uri) is not None:
        return _refused_redirect(runtime, pending)
    if decision != "allow":
        return RedirectResponse(runtime.oauth.denied_redirect(pending), status_code=303)
    await runtime.oauth.remember_consent(session, pending, user)
    target = await runtime.oauth.complete_authorization(session, pending, user)
    return RedirectResponse(target, status_code=303)


@router.post("/logout")
async def logout(
    request: Request,
    runtime: RuntimeDep,
    session: SessionDep,
    csrf_token: OptionalForm = None,
    next: OptionalForm = None,
) -> Response:
    if not runtime.csrf.verify(request, csrf_token):
        return runtime.pages.message(
            "Sign out failed", "Your form expired. Reload and try again.", status_code=400
        )
    await identity.end_browser_session(session, request.cookies.get(runtime.cookies.name(SESSION_COOKIE)))
    response = RedirectResponse(safe_next_path(next) or "/login", status_code=303)
    runtime.cookies.clear(response, SESSION_COOKIE)
    return response


@router.get("/account")
async def account(runtime: RuntimeDep, user: BrowserUser) -> Response:
    if user is None:
        return RedirectResponse(login_path("/account"), status_code=303)
    return runtime.pages.message("Signed in", f"You are signed in as {user.username}.")


@router.post("/revoke")
async def revoke(request: Request, runtime: RuntimeDep) -> Response:
    """RFC 7009 revocation, served ahead of the SDK's handler.

    The SDK's handler insists on a `client_secret` field even from public clients, which RFC 7009
    does not ask of them; client authentication itself is still the SDK's.
    """
    if runtime.oidc is not None:  # tokens come from the external issuer: revoke them there
        return JSONResponse({"error": "not_found"}, status_code=404)
    try:
        client = await HashedSecretAuthenticator(runtime.oauth).authenticate_request(request)
    except AuthenticationError as exc:
        return JSONResponse({"error": "invalid_client", "error_description": exc.message}, status_code=401)
    form = await request.form()
    token = form.get("token")
    if not isinstance(token, str) or not token:
        return JSONResponse(
            {"error": "invalid_request", "error_description": "token is required"}, status_code=400
        )
    found = await runtime.oauth.load_access_token(token) or await runtime.oauth.load_refresh_token(
        client, token
    )
    if found is not None and found.client_id == client.client_id:
        await runtime.oauth.revoke_token(found)
    # Unknown or foreign tokens get the same answer, so revocation cannot probe for valid tokens.
    return Response(status_code=200, headers={"Cache-Control": "no-store"})
