"""Builds the external-provider pieces in the lifespan: one HTTP client, discovery, keys, verifier, login."""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass

import httpx

from service.db.engine import SessionFactory
from service.identity.oauth_provider import DatabaseOAuthProvider
from service.identity.oidc.discovery import DiscoveryError, JwksCache, discover
from service.identity.oidc.identities import ExternalIdentities
from service.identity.oidc.introspection_limits import IntrospectionLimits
from service.identity.oidc.login import CALLBACK_PATH, OidcLogin
from service.identity.oidc.tokens import IntrospectedTokens, JwtAccessTokens
from service.identity.oidc.verifier import ExternalTokenVerifier, TokenValidator
from service.identity.throttle import AddressRateLimiter
from service.settings import HttpSettings, IdentitySettings, OidcSettings
from service.web.cookies import CookiePolicy


@dataclass(frozen=True)
class ExternalIdentityProvider:
    verifier: ExternalTokenVerifier
    login: OidcLogin
    keys: JwksCache
    identities: ExternalIdentities


async def start_external_identity(
    oidc: OidcSettings,
    http: HttpSettings,
    identity: IdentitySettings,
    stack: AsyncExitStack,
    sessions: SessionFactory,
    own_tokens: DatabaseOAuthProvider,
    cookies: CookiePolicy,
) -> ExternalIdentityProvider | None:
    """None without OIDC_ISSUER; otherwise discovery must succeed, or the service does not start."""
    if oidc.issuer is None:
        return None
    assert oidc.client_id is not None  # Settings refuses OIDC_ISSUER without a client
    assert oidc.client_secret is not None
    client_secret = oidc.client_secret.get_secret_value()
    client = httpx.AsyncClient(timeout=httpx.Timeout(10.0), follow_redirects=False)
    stack.push_async_callback(client.aclose)
    metadata = await discover(client, oidc.issuer)
    keys = JwksCache(client, metadata.jwks_uri, min_refresh_seconds=oidc.jwks_min_refresh_seconds)
    identities = ExternalIdentities(sessions)
    audience = oidc.expected_audience(http.mcp_resource_url)
    validator: TokenValidator
    if oidc.introspection:
        if metadata.introspection_endpoint is None:
            raise DiscoveryError(
                "OIDC_INTROSPECTION is set but the issuer advertises no introspection_endpoint"
            )
        validator = IntrospectedTokens(
            client,
            metadata.introspection_endpoint,
            issuer=metadata.issuer,
            audience=audience,
            client_id=oidc.client_id,
            client_secret=client_secret,
            limits=IntrospectionLimits(
                refusal_seconds=oidc.introspection_refusal_seconds,
                per_address_per_minute=oidc.introspections_per_address_per_minute,
                max_in_flight=oidc.introspections_in_flight,
            ),
        )
    else:
        validator = JwtAccessTokens(
            keys, issuer=metadata.issuer, audience=audience, algorithms=metadata.algorithms
        )
    verifier = ExternalTokenVerifier(
        validator, identities, own_tokens, audience=audience, cache_seconds=identity.token_cache_seconds
    )
    login = OidcLogin(
        client,
        metadata,
        keys,
        identities,
        cookies,
        sessions,
        AddressRateLimiter(per_window=oidc.callbacks_per_address_per_hour, window_seconds=3600),
        client_id=oidc.client_id,
        client_secret=client_secret,
        redirect_uri=http.public_base_url + CALLBACK_PATH,
        scopes=oidc.scopes,
        secret_key=http.secret_key.get_secret_value(),
    )
    return ExternalIdentityProvider(verifier=verifier, login=login, keys=keys, identities=identities)
