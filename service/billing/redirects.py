"""Where the service may send a browser on Stripe's word: Stripe's own Checkout and portal hosts."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

STRIPE_REDIRECT_HOSTS = frozenset({"checkout.stripe.com", "billing.stripe.com"})


class UntrustedRedirect(Exception):
    """Stripe answered with a Checkout or portal URL outside the allowed hosts; the message names it."""


@dataclass(frozen=True)
class RedirectPolicy:
    """`allowed_hosts` None allows any http(s) URL (development, where the sandbox serves the pages)."""

    allowed_hosts: frozenset[str] | None

    @classmethod
    def for_environment(cls, development: bool) -> RedirectPolicy:
        return cls(None if development else STRIPE_REDIRECT_HOSTS)

    def checked(self, url: str | None) -> str:
        """`url` if a browser may be sent there, else `UntrustedRedirect`."""
        parts = urlsplit(url or "")
        if self.allowed_hosts is None:
            if parts.scheme in ("http", "https") and parts.netloc:
                return url or ""
        elif (
            parts.scheme == "https"
            and parts.hostname in self.allowed_hosts
            and parts.port is None
            and not parts.username
            and not parts.password
        ):
            return url or ""
        raise UntrustedRedirect(f"refusing to redirect to {url!r}: not a Stripe Checkout or portal URL")


ANY_REDIRECT = RedirectPolicy(None)
