"""Pages that hold a form: rendered with a CSRF token, and the CSRF cookie set."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from service.web.csrf import CsrfProtect
from service.web.pages import Pages


class FormPages:
    """Renders form pages for one request, whose CSRF cookie (if it has one) the token matches."""

    def __init__(self, request: Request, pages: Pages, csrf: CsrfProtect) -> None:
        self._request = request
        self._pages = pages
        self._csrf = csrf

    def render(self, template: str, *, status_code: int = 200, **context: Any) -> Response:
        nonce, token = self._csrf.issue(self._request)
        page = self._pages.render(template, status_code=status_code, csrf_token=token, **context)
        return self._csrf.attach(page, nonce)
