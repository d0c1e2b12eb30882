"""Checks on the OIDC_* settings, so a half-configured external provider refuses to start."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from service.settings import Settings

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")


def oidc_setting_problems(settings: Settings) -> list[str]:
    """Everything wrong with the OIDC settings, each as a sentence naming the variable."""
    issuer = settings.oidc_issuer or ""
    parts = urlsplit(issuer)
    problems: list[str] = []
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        problems.append("OIDC_ISSUER must be an absolute https URL without query or fragment")
    elif parts.scheme == "http" and (not settings.is_development or parts.hostname not in LOOPBACK_HOSTS):
        problems.append(
            "OIDC_ISSUER must use https:// (plain http only for a loopback issuer in development)"
        )
    if not settings.oidc_client_id:
        problems.append(
            "OIDC_CLIENT_ID is required with OIDC_ISSUER (the payment page signs users in with it)"
        )
    if settings.oidc_client_secret is None or not settings.oidc_client_secret.get_secret_value():
        problems.append("OIDC_CLIENT_SECRET is required with OIDC_ISSUER")
    if "openid" not in settings.oidc_scopes.split():
        problems.append("OIDC_SCOPES must include openid")
    return problems
