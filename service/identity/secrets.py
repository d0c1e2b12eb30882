"""Random bearer secrets and their stored digests."""

from __future__ import annotations

import hashlib
import secrets


def new_secret(prefix: str) -> str:
    """A bearer secret with a readable prefix (so a leaked one is recognisable) and 256 random bits."""
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def digest(secret: str) -> str:
    """SHA-256 suffices: the secrets have 256 bits of entropy, so no stretching is needed."""
    return hashlib.sha256(secret.encode()).hexdigest()
