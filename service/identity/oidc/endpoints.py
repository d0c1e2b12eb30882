"""The redirect URI registered at the issuer: where the browser returns after signing in there."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from service.dependencies import (
    BrowserSessionSecret,
    CookiesDep,
    OidcDep,
    PagesDep,
    SessionDep,
    SettingsDep,
)
from service.identity import service as identity
from service.identity.oidc.login import CALLBACK_PATH, LoginFailed
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
) -> Response:
    if login is None:
        return pages.message("Not found", "There is no external sign-in here.", status_code=404)
    try:
        signed_in = await login.finish(request)
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
