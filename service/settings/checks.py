"""Pure checks and paths the settings need; domains import them from here, so settings import no domain."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost"})

# The built-in plan catalog, shipped beside the billing code that reads it.
DEFAULT_PLANS_FILE = Path(__file__).resolve().parent.parent / "billing" / "default_plans.toml"


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback IP address (no name resolution)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def upstream_url_problem(url: str, *, development: bool) -> str | None:
    """Why `url` cannot be the upstream, or None.

    The upstream's credential and the signed user header travel with every call, so they must be
    encrypted in transit: `https` always works; plain `http` only to a loopback host in development.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "UPSTREAM_MCP_URL must be an absolute http(s) URL"
    if parts.scheme == "http" and not (development and is_loopback_host(parts.hostname)):
        return "UPSTREAM_MCP_URL must use https:// (plain http only to a loopback host in development)"
    return None


def oidc_issuer_problem(issuer: str, *, development: bool) -> str | None:
    """Why `issuer` cannot be the external OpenID Connect provider, or None."""
    parts = urlsplit(issuer)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        return "OIDC_ISSUER must be an absolute https URL without query or fragment"
    if parts.scheme == "http" and not (development and is_loopback_host(parts.hostname or "")):
        return "OIDC_ISSUER must use https:// (plain http only for a loopback issuer in development)"
    return None
