"""Reading the form of an OAuth request (/token, /revoke, /authorize, the consent page) so that a form
Starlette cannot read is the client's error, never a 500.

Starlette turns only some unreadable forms into its own 400 (multipart without a boundary, too many
fields); others escape as plain exceptions, e.g. a multipart part whose `charset` names a codec such
as `idna` raises `UnicodeError`, which its decoding does not catch.
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import JSONResponse


class UnreadableForm(Exception):
    """The request's form could not be parsed or decoded; `reason` says why, in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def read_form(request: Request) -> FormData:
    """The request's form, which Starlette keeps on the request for later readers (the SDK's handlers).

    Raises `UnreadableForm` when it cannot be read."""
    try:
        return await request.form()
    except HTTPException as refused:  # Starlette's own 400 for a multipart form it could not parse
        raise UnreadableForm(str(refused.detail)) from refused
    except MultiPartException as exc:  # the same, raised bare when the request has no app in scope
        raise UnreadableForm(exc.message) from exc
    except ValueError as exc:  # UnicodeError from an odd charset, or python-multipart's parse errors
        raise UnreadableForm("a field could not be decoded") from exc


def invalid_request(unreadable: UnreadableForm) -> JSONResponse:
    """The OAuth error (RFC 6749 §5.2) for an unreadable form, answered by /token and /revoke."""
    return JSONResponse(
        {
            "error": "invalid_request",
            "error_description": f"the form could not be read ({unreadable.reason})",
        },
        status_code=400,
        headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
    )
