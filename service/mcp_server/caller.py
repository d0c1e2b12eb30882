"""The calling user, from the verified bearer token and nothing else.

Tools and the paywall ask a `CallerSource` who called them. The service wires `verified_caller`,
which reads only the token the SDK's bearer authentication verified; there is no setting or header
that picks another source. Only code that builds the app in-process (the in-memory test tier) can
hand in a different one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mcp.server.auth.middleware.auth_context import get_access_token


class NoAuthenticatedCaller(Exception):
    """A tool ran without a verified token; the transport's auth layer should make this impossible."""


@dataclass(frozen=True)
class Caller:
    user_id: str
    client_id: str


CallerSource = Callable[[], Caller]  # who is calling the tool that runs now


def verified_caller() -> Caller:
    """The caller named by the bearer token the SDK verified for this request."""
    token = get_access_token()
    if token is None or not token.subject:
        raise NoAuthenticatedCaller("this tool needs an authenticated caller")
    return Caller(user_id=token.subject, client_id=token.client_id)
