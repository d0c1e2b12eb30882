"""The signed user header the gateway sends upstream, and the check a vendor runs on it.

Format (one header, ASCII):

    X-Paid-MCP-User: <user_id>.<unix_seconds>.<hex HMAC-SHA256(secret, "<user_id>.<unix_seconds>")>

`user_id` is this service's stable account id (e.g. `usr_...`); `unix_seconds` is when the call
was forwarded. The upstream recomputes the HMAC with the shared `UPSTREAM_USER_HEADER_SECRET`,
compares in constant time and refuses stale timestamps (replay window). This module uses only the
standard library so a vendor can import it (`from service.gateway.signing import verify_user_header`)
or copy it as is.
"""

from __future__ import annotations

import hashlib
import hmac
import time

USER_HEADER = "X-Paid-MCP-User"
DEFAULT_MAX_AGE_SECONDS = 300


class InvalidUserHeader(ValueError):
    """The header is malformed, forged, or too old; the message says which."""


def _mac(secret: str, user_id: str, timestamp: int) -> str:
    message = f"{user_id}.{timestamp}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign_user_header(secret: str, user_id: str, *, now: float | None = None) -> str:
    """The header value naming `user_id`, signed at `now` (default: the current time)."""
    timestamp = int(time.time() if now is None else now)
    return f"{user_id}.{timestamp}.{_mac(secret, user_id, timestamp)}"


def verify_user_header(
    secret: str, value: str, *, max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS, now: float | None = None
) -> str:
    """The user id the header names, if its signature is valid and it is recent; else `InvalidUserHeader`.

    The value is split from the right, so a user id containing dots still verifies.
    """
    user_id, _, rest = value.rpartition(".")
    user_id, _, timestamp_text = user_id.rpartition(".")
    if not user_id or not timestamp_text.isdigit() or not rest:
        raise InvalidUserHeader(f"{USER_HEADER} is not <user_id>.<timestamp>.<signature>")
    timestamp = int(timestamp_text)
    if not hmac.compare_digest(_mac(secret, user_id, timestamp), rest):
        raise InvalidUserHeader(f"{USER_HEADER} has a bad signature")
    age = (time.time() if now is None else now) - timestamp
    if abs(age) > max_age_seconds:
        raise InvalidUserHeader(f"{USER_HEADER} is {int(age)} s old, beyond {max_age_seconds} s")
    return user_id
