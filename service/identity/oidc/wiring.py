"""Builds the external-provider pieces in the lifespan: one HTTP client, discovery, keys, verifier, login."""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass

import httpx

from service.db.engine import SessionFactory
from service.identity.oauth_provider import DatabaseOAuthProvider
from service.identity.oidc.discovery import DiscoveryError, JwksCache, discover
from service.identity.oidc.identities import ExternalIdentities
from service.identity.oidc.login import CALLBACK_PATH, OidcLogin
from service.identity.oidc.tokens import IntrospectedTokens, JwtAccessTokens
from service.identity.oidc.verifier import ExternalTokenVerifier, TokenValidator
from service.settings import Settings
from service.web.cookies import CookiePolicy


@dataclass(frozen=True)
class ExternalIdentityProvider:
    verifier: ExternalTokenVerifier
    login: OidcLogin
    keys: JwksCache
    identities: ExternalIdentities


async def start_external_identity(
    settings: Settings,
    stack: AsyncExitStack,
    sessions: SessionFactory,
    own_tokens: DatabaseOAuthProvider,
    cookies: CookiePolicy,
) -> ExternalIdentityProvider | None:
    """None without OIDC_ISSUER; otherwise discovery must succeed, or the service does not start."""
    if settings.oidc_issuer is None:
        return None
    assert settings.oidc_client_id is not None  # Settings refuses OIDC_ISSUER without a client
    assert settings.oidc_client_secret is not None
    client_secret = settings.oidc_client_secret.get_secret_value()
    http = httpx.AsyncClient(timeout=httpx.Timeout(10.0), follow_redirects=False)
    stack.push_async_callback(http.aclose)
    metadata = await discover(http, settings.oidc_issuer)
    keys = JwksCache(http, metadata.jwks_uri, min_refresh_seconds=settings.oidc_jwks_min_refresh_seconds)
    identities = ExternalIdentities(sessions)
    audience = settings.oidc_expected_audience
    validator: TokenValidator
    if settings.oidc_introspection:
        if metadata.introspection_endpoint is None:
            raise DiscoveryError(
                "OIDC_INTROSPECTION is set but the issuer advertises no introspection_endpoint"
            )
        validator = IntrospectedTokens(
            http,
            metadata.introspection_endpoint,
            issuer=metadata.issuer,
            audience=audience,
            client_id=settings.oidc_client_id,
            client_secret=client_secret,
        )
    else:
        validator = JwtAccessTokens(
            keys, issuer=metadata.issuer, audience=audience, algorithms=metadata.algorithms
        )
    verifier = ExternalTokenVerifier(
        validator, identities, own_tokens, audience=audience, cache_seconds=settings.token_cache_seconds
    )
    login = OidcLogin(
        http,
        metadata,
        keys,
        identities,
        cookies,
        client_id=settings.oidc_client_id,
        client_secret=client_secret,
        redirect_uri=settings.public_base_url + CALLBACK_PATH,
        scopes=settings.oidc_scopes,
        secret_key=settings.secret_key.get_secret_value(),
    )
    return ExternalIdentityProvider(verifier=verifier, login=login, keys=keys, identities=identities)
