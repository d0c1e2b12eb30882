"""The sign-in and consent pages' addresses, and the check that keeps a return path on this site."""

from __future__ import annotations

from urllib.parse import urlencode


def safe_next_path(value: str | None) -> str | None:
    """Only same-origin absolute paths: an open redirect here would be a phishing tool."""
    if value and value.startswith("/") and not value.startswith(("//", "/\\")):
        return value
    return None


def login_path(next_path: str) -> str:
    return "/login?" + urlencode({"next": next_path})


def consent_path(authz: str) -> str:
    return "/authorize/consent?" + urlencode({"authz": authz})
