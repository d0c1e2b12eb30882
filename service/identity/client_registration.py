"""What dynamic client registration accepts: redirect URIs a browser can safely be sent to, at a
bounded rate per client address."""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Sequence

from mcp.server.auth.provider import RegistrationError
from pydantic import AnyUrl
from starlette.requests import Request

from service.web.client_address import ClientAddresses

MAX_REDIRECT_URIS = 10
MAX_REDIRECT_URI_LENGTH = 2000
MAX_CLIENT_NAME_LENGTH = 100
LOOPBACK_NAMES = ("localhost",)


def client_address(request: Request, addresses: ClientAddresses) -> str:
    """The address a request came from, as rate limits key it (X-Forwarded-For from trusted proxies)."""
    return addresses.of(request.scope) or "unknown"


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def redirect_uri_problem(uri: AnyUrl) -> str | None:
    """Why `uri` may not receive authorization codes, or None if it may.

    Only `https`, or `http` to this machine's loopback for native apps (RFC 8252 §7.3): no
    scripts, data, other schemes, fragments (RFC 6749 §3.1.2) or user info that disguises a host.
    """
    text = str(uri)
    if len(text) > MAX_REDIRECT_URI_LENGTH:
        return f"redirect URIs are at most {MAX_REDIRECT_URI_LENGTH} characters"
    if uri.fragment is not None or "#" in text:
        return f"redirect URI {text!r} has a fragment"
    if uri.username is not None or uri.password is not None:
        return f"redirect URI {text!r} carries user info"
    if uri.scheme == "https" and uri.host:
        return None
    if uri.scheme == "http" and uri.host and _is_loopback(uri.host):
        return None
    return f"redirect URI {text!r} must use https, or http to a loopback address"


def check_registration(redirect_uris: Sequence[AnyUrl] | None, client_name: str | None) -> None:
    """Raises the SDK's `RegistrationError` (a 400 with RFC 7591's error codes) for what we refuse."""
    if not redirect_uris:
        raise RegistrationError("invalid_redirect_uri", "at least one redirect URI is required")
    if len(redirect_uris) > MAX_REDIRECT_URIS:
        raise RegistrationError("invalid_redirect_uri", f"at most {MAX_REDIRECT_URIS} redirect URIs")
    for uri in redirect_uris:
        problem = redirect_uri_problem(uri)
        if problem is not None:
            raise RegistrationError("invalid_redirect_uri", problem)
    if client_name is not None and len(client_name) > MAX_CLIENT_NAME_LENGTH:
        raise RegistrationError(
            "invalid_client_metadata", f"client_name is at most {MAX_CLIENT_NAME_LENGTH} characters"
        )


class RegistrationLimiter:
    """A token bucket per client address, held in this process.

    Refusing costs no database work, so a flood of registrations stays cheap; with several
    replicas an address may register up to (replicas x limit) clients per window.
    """

    def __init__(self, *, per_window: int, window_seconds: float, max_addresses: int = 10_000) -> None:
        self._capacity = float(per_window)
        self._refill_per_second = per_window / window_seconds
        self._max_addresses = max_addresses
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address: (tokens, at)

    def allow(self, address: str) -> bool:
        """Takes one registration from `address`'s bucket; False when it is empty."""
        now = time.monotonic()
        tokens, at = self._buckets.pop(address, (self._capacity, now))
        tokens = min(self._capacity, tokens + (now - at) * self._refill_per_second)
        allowed = tokens >= 1.0
        self._buckets[address] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self._max_addresses:
            self._buckets.popitem(last=False)
        return allowed

    def retry_after(self, address: str) -> int:
        """Whole seconds until `address` may register again."""
        tokens, _ = self._buckets.get(address, (self._capacity, 0.0))
        return max(1, int((1.0 - tokens) / self._refill_per_second) + 1)
