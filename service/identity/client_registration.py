"""What dynamic client registration accepts: redirect URIs a browser can safely be sent to and
metadata of bounded size, none we would store without using, at a bounded rate per client address
(IPv6 by /64) and across the deployment."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from mcp.server.auth.provider import RegistrationError
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
from pydantic import AnyUrl
from starlette.requests import Request

from service.identity.throttle import ip_key
from service.web.client_address import ClientAddresses

MAX_REDIRECT_URIS = 10
MAX_REDIRECT_URI_LENGTH = 2000
MAX_CLIENT_NAME_LENGTH = 100
# The rest of a registration is stored as it came (`oauth_client.info_json`), so each part is
# bounded, and the whole: the SDK's model takes any `jwks` and any strings as grant types.
MAX_CONTACTS = 5
MAX_CONTACT_LENGTH = 320
MAX_SCOPE_LENGTH = 1000
MAX_SOFTWARE_FIELD_LENGTH = 200
MAX_URI_LENGTH = 2000
MAX_TYPES = 5  # grant_types, response_types
MAX_TYPE_LENGTH = 100
# What one registration may add to `oauth_client.info_json`, and the request body it may come in
# (the body is larger, for whitespace and escapes); far above what MCP clients send.
MAX_METADATA_BYTES = 8 * 1024
MAX_REGISTRATION_BODY_BYTES = 32 * 1024
REGISTRATION_PATH = "/register"
# Client keys only serve `private_key_jwt`, which /token does not accept: stored, they would be unused.
UNUSED_KEY_FIELDS = ("jwks", "jwks_uri")
LOOPBACK_NAMES = ("localhost",)


def client_address(request: Request, addresses: ClientAddresses) -> str:
    """The address a request came from, as rate limits key it (X-Forwarded-For from trusted proxies),
    IPv6 by its /64 as the sign-in throttle keys it, since one host can use any address in it."""
    return ip_key(addresses.of(request.scope) or "unknown")


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


def check_registration(metadata: OAuthClientMetadata | OAuthClientInformationFull) -> None:
    """Raises the SDK's `RegistrationError` (a 400 with RFC 7591's error codes) for what we refuse."""
    check_redirect_uris(metadata.redirect_uris)
    problem = metadata_problem(metadata)
    if problem is not None:
        raise RegistrationError("invalid_client_metadata", problem)


def metadata_problem(metadata: OAuthClientMetadata | OAuthClientInformationFull) -> str | None:
    """Why a registration's metadata other than its redirect URIs is too large or unused to store, or None."""
    for unused in UNUSED_KEY_FIELDS:
        if getattr(metadata, unused) is not None:
            return f"{unused} is not accepted: this server does not support private_key_jwt"
    texts = {
        "client_name": (metadata.client_name, MAX_CLIENT_NAME_LENGTH),
        "scope": (metadata.scope, MAX_SCOPE_LENGTH),
        "software_id": (metadata.software_id, MAX_SOFTWARE_FIELD_LENGTH),
        "software_version": (metadata.software_version, MAX_SOFTWARE_FIELD_LENGTH),
    }
    for uri_field in ("client_uri", "logo_uri", "tos_uri", "policy_uri"):
        uri = getattr(metadata, uri_field)
        texts[uri_field] = (None if uri is None else str(uri), MAX_URI_LENGTH)
    for name, (text, limit) in texts.items():
        if text is not None and len(text) > limit:
            return f"{name} is at most {limit} characters"
    lists = {
        "contacts": (metadata.contacts or [], MAX_CONTACTS, MAX_CONTACT_LENGTH),
        "grant_types": (metadata.grant_types, MAX_TYPES, MAX_TYPE_LENGTH),
        "response_types": (metadata.response_types, MAX_TYPES, MAX_TYPE_LENGTH),
    }
    for name, (items, most, limit) in lists.items():
        if len(items) > most:
            return f"{name} has at most {most} entries"
        if any(len(item) > limit for item in items):
            return f"each of {name} is at most {limit} characters"
    # Measured as `register_client` stores it: without the client secret, whose digest alone is kept.
    stored = metadata.model_dump_json(exclude_none=True, exclude={"client_secret"})
    if len(stored.encode()) > MAX_METADATA_BYTES:
        return f"client metadata is at most {MAX_METADATA_BYTES} bytes as stored"
    return None


def check_redirect_uris(redirect_uris: Sequence[AnyUrl] | None) -> None:
    """`RegistrationError` (`invalid_redirect_uri`) unless every URI may receive codes."""
    if not redirect_uris:
        raise RegistrationError("invalid_redirect_uri", "at least one redirect URI is required")
    if len(redirect_uris) > MAX_REDIRECT_URIS:
        raise RegistrationError("invalid_redirect_uri", f"at most {MAX_REDIRECT_URIS} redirect URIs")
    for uri in redirect_uris:
        problem = redirect_uri_problem(uri)
        if problem is not None:
            raise RegistrationError("invalid_redirect_uri", problem)
