"""Which upstream URLs the gateway accepts; kept apart from `Settings` so the rule is testable alone."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost"})


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
