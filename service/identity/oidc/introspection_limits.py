"""Bounds on the introspection requests unauthenticated `/mcp` requests can make us send the issuer.

Each RFC 7662 introspection is a `POST` to the issuer with our client's credentials, made before
the caller is known; unbounded, every request with a made-up bearer token would cost one, and a
flood would be relayed to the issuer under our client's name. Three bounds, all per replica:

- **Refusals are remembered.** A token the issuer refused (inactive, expired, for another audience
  or issuer) is refused again without asking for `OIDC_INTROSPECTION_REFUSAL_SECONDS`, by its
  digest (never the token), in a table of at most `MAX_REMEMBERED_REFUSALS` entries, oldest first
  out. A failed introspection (the issuer unreachable or erring) is not remembered.
- **A budget per client address.** A token bucket of `OIDC_INTROSPECTIONS_PER_ADDRESS_PER_MINUTE`
  per client address (as `TRUSTED_PROXIES` makes it out, IPv6 by /64); past it `429`.
- **A cap on introspections in flight.** At most `OIDC_INTROSPECTIONS_IN_FLIGHT` wait on the issuer
  at once; past it a token is refused at once with `503` rather than queued.

Accepted tokens are remembered by `ExternalTokenVerifier` and cost none of these. The client address
reaches the verifier (whose SDK interface carries only the token) through `CLIENT_ADDRESS`, set by
`service.mcp_server.bearer` around authentication.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar

from service.identity.secrets import digest
from service.identity.throttle import AddressRateLimiter, ip_key
from service.identity.token_cache import TokenCache

MAX_REMEMBERED_REFUSALS = 10_000
BUSY_RETRY_AFTER_SECONDS = 1
# Requests whose address is unknown share one budget, so not knowing an address never lifts the limit.
UNKNOWN_ADDRESS = "unknown"

CLIENT_ADDRESS: ContextVar[str | None] = ContextVar("introspection_client_address", default=None)


class IntrospectionRefused(Exception):
    """A token refused before introspection because a bound was reached; not a verdict on the token."""

    def __init__(self, message: str, *, status_code: int, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after_seconds = retry_after_seconds


class IntrospectionLimits:
    def __init__(self, *, refusal_seconds: float, per_address_per_minute: int, max_in_flight: int) -> None:
        self._refusals: TokenCache[bool] = TokenCache(
            ttl=refusal_seconds, max_entries=MAX_REMEMBERED_REFUSALS
        )
        self._budgets = AddressRateLimiter(per_window=per_address_per_minute, window_seconds=60)
        self._max_in_flight = max_in_flight
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def was_refused(self, token: str) -> bool:
        return self._refusals.get(digest(token)) is not None

    def refused(self, token: str) -> None:
        self._refusals.put(digest(token), "", True, expires_at=None)

    @asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """One introspection for the current request's address; raises `IntrospectionRefused` when
        the replica's cap or the address's budget is reached (the cap first, so it costs no budget)."""
        if self._in_flight >= self._max_in_flight:
            raise IntrospectionRefused(
                "Too many token checks under way; retry in a moment.",
                status_code=503,
                retry_after_seconds=BUSY_RETRY_AFTER_SECONDS,
            )
        address = ip_key(CLIENT_ADDRESS.get() or UNKNOWN_ADDRESS)
        if not self._budgets.allow(address):
            raise IntrospectionRefused(
                "Too many unrecognised tokens from this address; retry later.",
                status_code=429,
                retry_after_seconds=self._budgets.retry_after(address),
            )
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
