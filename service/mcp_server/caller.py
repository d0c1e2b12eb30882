"""The calling user, from the verified bearer token and nothing else."""

from __future__ import annotations

from dataclasses import dataclass

from mcp.server.auth.middleware.auth_context import get_access_token


class NoAuthenticatedCaller(Exception):
    """A tool ran without a verified token; the transport's auth layer should make this impossible."""


@dataclass(frozen=True)
class Caller:
    user_id: str
    client_id: str


def current_caller() -> Caller:
    token = get_access_token()
    if token is None or not token.subject:
        raise NoAuthenticatedCaller("this tool needs an authenticated caller")
    return Caller(user_id=token.subject, client_id=token.client_id)
