"""The issuer's metadata (OIDC discovery) and its signing keys (JWKS), fetched over one injected client.

Keys are cached. A token signed with a key id we do not know makes us refetch the JWKS (the issuer
may have rotated), but at most once per `min_refresh_seconds`, so a stream of forged key ids
cannot turn us into a load generator against the issuer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from joserfc.errors import JoseError
from joserfc.jwk import JWKRegistry, Key

logger = logging.getLogger(__name__)

DEFAULT_ALGORITHMS = ("RS256", "PS256", "ES256", "ES384", "EdDSA")
ASYMMETRIC_PREFIXES = ("RS", "PS", "ES", "Ed")


class DiscoveryError(Exception):
    """The issuer's discovery document is unreachable or inconsistent; the message says which."""


@dataclass(frozen=True)
class ProviderMetadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    introspection_endpoint: str | None
    algorithms: tuple[str, ...]


def _string(document: dict[str, Any], name: str) -> str:
    value = document.get(name)
    if not isinstance(value, str) or not value.startswith(("https://", "http://")):
        raise DiscoveryError(f"the issuer's discovery document has no usable {name}")
    return value


async def discover(http: httpx.AsyncClient, issuer: str) -> ProviderMetadata:
    """OpenID Connect Discovery 1.0; the document's `issuer` must equal ours exactly (mix-up defence)."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = await http.get(url)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise DiscoveryError(f"cannot read {url}: {exc}") from exc
    if not isinstance(document, dict) or document.get("issuer") != issuer:
        raise DiscoveryError(f"{url} names another issuer than OIDC_ISSUER={issuer}")
    advertised = document.get("id_token_signing_alg_values_supported")
    algorithms = tuple(
        alg
        for alg in (advertised if isinstance(advertised, list) else DEFAULT_ALGORITHMS)
        if isinstance(alg, str) and alg.startswith(ASYMMETRIC_PREFIXES)  # never "none" or HMAC
    )
    introspection = document.get("introspection_endpoint")
    return ProviderMetadata(
        issuer=issuer,
        authorization_endpoint=_string(document, "authorization_endpoint"),
        token_endpoint=_string(document, "token_endpoint"),
        jwks_uri=_string(document, "jwks_uri"),
        introspection_endpoint=introspection if isinstance(introspection, str) else None,
        algorithms=algorithms or DEFAULT_ALGORITHMS,
    )


class JwksCache:
    """The issuer's public signing keys by key id, refreshed on age and on unknown key ids."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        jwks_uri: str,
        *,
        min_refresh_seconds: float,
        max_age_seconds: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = http
        self._uri = jwks_uri
        self._min_refresh = min_refresh_seconds
        self._max_age = max_age_seconds
        self._clock = clock
        self._keys: dict[str | None, Key] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()
        self.fetches = 0  # how many times the JWKS was downloaded; tests and operators read it

    async def key_for(self, kid: str | None) -> Key | None:
        """The key that signed a token with this `kid`, or None when the issuer has no such key."""
        if self._fetched_at is None or self._clock() - self._fetched_at >= self._max_age:
            await self._refresh(force=True)
        key = self._find(kid)
        if key is None:
            await self._refresh(force=False)
            key = self._find(kid)
        return key

    def _find(self, kid: str | None) -> Key | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    async def _refresh(self, *, force: bool) -> None:
        started = self._clock()
        async with self._lock:
            if self._fetched_at is not None and self._fetched_at >= started:
                return  # another request refreshed while we waited
            if (
                not force
                and self._fetched_at is not None
                and self._clock() - self._fetched_at < self._min_refresh
            ):
                return
            try:
                response = await self._http.get(self._uri)
                response.raise_for_status()
                document = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                # Keep the keys we have: an issuer hiccup must not log everybody out.
                logger.warning("cannot refresh the issuer's JWKS from %s: %s", self._uri, exc)
                self._fetched_at = self._clock()
                return
            self.fetches += 1
            self._keys = _signing_keys(document)
            self._fetched_at = self._clock()


def _signing_keys(document: object) -> dict[str | None, Key]:
    entries = document.get("keys") if isinstance(document, dict) else None
    keys: dict[str | None, Key] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        try:
            key = JWKRegistry.import_key(entry)
        except (JoseError, ValueError, TypeError):
            continue  # a key type we cannot use; the others still work
        keys[entry.get("kid")] = key
    return keys
