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


def hidden_fields(html: str) -> dict[str, str]:
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', html))


async def decide_consent(
    browser: httpx.AsyncClient, consent_url: str, decision: str = "allow"
) -> httpx.Response:
    """GET the consent page a sign-in led to, then press Allow (or Deny) on it."""
    page = await browser.get(consent_url)
    assert page.status_code == 200, page.text
    fields = hidden_fields(page.text)
    fields["decision"] = decision
    return await browser.post("/authorize/consent", data=fields)


async def sign_in_and_allow(
    browser: httpx.AsyncClient, login_url: str, username: str, password: str
) -> httpx.Response:
    """Sign in on an OAuth login page and approve the client: the response redirects with a code."""
    signed_in = await log_in_through_form(browser, login_url, username, password)
    assert signed_in.status_code == 303, signed_in.text
    assert signed_in.headers["location"].startswith("/authorize/consent?"), signed_in.headers["location"]
    return await decide_consent(browser, signed_in.headers["location"])
