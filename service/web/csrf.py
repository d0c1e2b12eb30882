"""Double-submit CSRF protection: a random cookie and a form field holding its HMAC.

A cross-site form cannot read the cookie, so it cannot produce the matching field. The cookie is
SameSite=Strict and independent of login, so it also protects the login form itself.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.requests import Request
from starlette.responses import Response

from service.web.cookies import CSRF_COOKIE, CookiePolicy

CSRF_COOKIE_MAX_AGE = 12 * 3600


class CsrfProtect:
    def __init__(self, secret_key: str, cookies: CookiePolicy) -> None:
        self._key = secret_key.encode()
        self._cookies = cookies

    def _mac(self, nonce: str) -> str:
        return hmac.new(self._key, f"csrf:{nonce}".encode(), hashlib.sha256).hexdigest()

    def issue(self, request: Request) -> tuple[str, str]:
        """The (cookie nonce, form token) pair for a page that shows a form."""
        nonce = request.cookies.get(self._cookies.name(CSRF_COOKIE)) or secrets.token_urlsafe(24)
        return nonce, self._mac(nonce)

    def attach(self, response: Response, nonce: str) -> Response:
        self._cookies.set(response, CSRF_COOKIE, nonce, max_age=CSRF_COOKIE_MAX_AGE, samesite="strict")
        return response

    def verify(self, request: Request, form_token: str | None) -> bool:
        nonce = request.cookies.get(self._cookies.name(CSRF_COOKIE))
        if not nonce or not form_token:
            return False
        # Bytes, not str: compare_digest raises TypeError on a str holding non-ASCII characters.
        return hmac.compare_digest(self._mac(nonce).encode(), form_token.encode())
