"""The redirect URI registered at the issuer: where the browser returns after signing in there."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from service.dependencies import (
    BrowserSessionSecret,
    ClientIp,
    CookiesDep,
    OidcDep,
    PagesDep,
    SessionDep,
    SettingsDep,
)
from service.identity import service as identity
from service.identity.oidc.login import CALLBACK_PATH, CallbackThrottled, LoginFailed
from service.web.cookies import SESSION_COOKIE

router = APIRouter(tags=["identity"])


@router.get(CALLBACK_PATH)
async def oidc_callback(
    request: Request,
    login: OidcDep,
    pages: PagesDep,
    settings: SettingsDep,
    cookies: CookiesDep,
    session: SessionDep,
    previous: BrowserSessionSecret,
    client_ip: ClientIp,
) -> Response:
    if login is None:
        return pages.message("Not found", "There is no external sign-in here.", status_code=404)
    try:
        signed_in = await login.finish(request, client_ip)
    except CallbackThrottled as exc:
        # The login cookie is kept: its state was not consumed, so the same answer may come back later.
        page = pages.message(
            "Too many sign-ins",
            "Too many sign-ins from your network. Wait a moment, then try again.",
            status_code=429,
        )
        page.headers["Retry-After"] = str(exc.retry_after_seconds)
        return page
    except LoginFailed as exc:
        page = pages.message(
            "Sign-in failed", str(exc), status_code=400, link_href="/login", link_text="Try again"
        )
        login.forget(page)
        return page
    ttl = settings.identity.browser_session_ttl_seconds
    secret = await identity.start_browser_session(
        session,
        signed_in.user,
        timedelta(seconds=ttl),
        replaces=previous,
        max_live=settings.identity.max_browser_sessions_per_user,
    )
    response = RedirectResponse(signed_in.next_path, status_code=303)
    cookies.set(response, SESSION_COOKIE, secret, max_age=ttl)
    login.forget(response)
    return response
