"""Drives the service's own login pages over plain HTTP, the way a browser would."""

from __future__ import annotations

import re

import httpx

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_token(html: str) -> str:
    match = CSRF_FIELD.search(html)
    assert match, "page has no CSRF field"
    return match.group(1)


async def log_in_through_form(
    browser: httpx.AsyncClient, login_url: str, username: str, password: str
) -> httpx.Response:
    """GET the login page (it sets the CSRF cookie), then POST the form with its hidden fields."""
    page = await browser.get(login_url)
    assert page.status_code == 200, page.text
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text))
    fields.update(username=username, password=password)
    return await browser.post("/login", data=fields)
