"""The signed user header the gateway sends upstream, and the check a vendor runs on it.

Format (one header, ASCII):

    X-Paid-MCP-User: <user_id>.<unix_seconds>.<hex HMAC-SHA256(secret, message)>
    message = "<user_id>.<unix_seconds>.<tool name>.<arguments digest>"
    arguments digest = hex SHA-256 of json.dumps(arguments, sort_keys=True, separators=(",", ":"))

`user_id` is this service's stable account id (e.g. `usr_...`); `unix_seconds` is when the call
was forwarded. The signature binds the header to the one tool call it came with: the upstream
recomputes it from the `tools/call` request's own `name` and `arguments` with the shared
`UPSTREAM_USER_HEADER_SECRET`, compares in constant time and refuses anything older than
`DEFAULT_MAX_AGE_SECONDS`, so a captured header neither runs another tool, nor the same tool with
other arguments, nor the same call again a minute later. This module uses only the standard
library so a vendor can import it (`from service.gateway.signing import verify_user_header`) or
copy it as is.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

USER_HEADER = "X-Paid-MCP-User"
DEFAULT_MAX_AGE_SECONDS = 30
# Far beyond any Unix time in seconds, and far below the digits `int()` refuses to convert.
_MAX_TIMESTAMP_DIGITS = 20


class InvalidUserHeader(ValueError):
    """The header is malformed, forged, for another call, or too old; the message says which."""


def arguments_digest(arguments: Mapping[str, Any] | None) -> str:
    """Hex SHA-256 of the arguments' canonical JSON (sorted keys, no spaces, ASCII escapes)."""
    canonical = json.dumps(dict(arguments or {}), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _mac(secret: str, user_id: str, timestamp: int, tool_name: str, digest: str) -> str:
    message = f"{user_id}.{timestamp}.{tool_name}.{digest}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign_user_header(
    secret: str,
    user_id: str,
    *,
    tool_name: str,
    arguments: Mapping[str, Any] | None,
    now: float | None = None,
) -> str:
    """The header value naming `user_id` for this one call of `tool_name`, signed at `now`."""
    timestamp = int(time.time() if now is None else now)
    mac = _mac(secret, user_id, timestamp, tool_name, arguments_digest(arguments))
    return f"{user_id}.{timestamp}.{mac}"


def verify_user_header(
    secret: str,
    value: str,
    *,
    tool_name: str,
    arguments: Mapping[str, Any] | None,
    max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
    now: float | None = None,
) -> str:
    """The user id the header names, if it was signed for this call and is recent; else `InvalidUserHeader`.

    `tool_name` and `arguments` are the `tools/call` request's own. The value is split from the
    right, so a user id containing dots still verifies.
    """
    user_id, _, rest = value.rpartition(".")
    user_id, _, timestamp_text = user_id.rpartition(".")
    # ASCII digits only: `isdigit()` alone admits characters such as "²" that `int()` rejects.
    well_formed = timestamp_text.isascii() and timestamp_text.isdigit()
    if not user_id or not well_formed or len(timestamp_text) > _MAX_TIMESTAMP_DIGITS or not rest:
        raise InvalidUserHeader(f"{USER_HEADER} is not <user_id>.<timestamp>.<signature>")
    timestamp = int(timestamp_text)
    expected = _mac(secret, user_id, timestamp, tool_name, arguments_digest(arguments))
    if not hmac.compare_digest(expected, rest):
        raise InvalidUserHeader(f"{USER_HEADER} has a bad signature or was signed for another call")
    age = (time.time() if now is None else now) - timestamp
    if abs(age) > max_age_seconds:
        raise InvalidUserHeader(f"{USER_HEADER} is {int(age)} s old, beyond {max_age_seconds} s")
    return user_id
