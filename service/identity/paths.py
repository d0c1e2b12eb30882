"""The sign-in and consent pages' addresses, and the check that keeps a return path on this site."""

from __future__ import annotations

from urllib.parse import urlencode

# Far longer than any path of ours; a longer `next` is ignored, as an unsafe one is, so a sign-in
# never answers with a Location header as long as the form it was sent.
MAX_NEXT_PATH_LENGTH = 2048


def safe_next_path(value: str | None) -> str | None:
    """Only same-origin absolute paths, of a bounded length: an open redirect here would be a
    phishing tool."""
    if (
        value
        and len(value) <= MAX_NEXT_PATH_LENGTH
        and value.startswith("/")
        and not value.startswith(("//", "/\\"))
    ):
        return value
    return None


def login_path(next_path: str) -> str:
    return "/login?" + urlencode({"next": next_path})


def consent_path(authz: str) -> str:
    return "/authorize/consent?" + urlencode({"authz": authz})
