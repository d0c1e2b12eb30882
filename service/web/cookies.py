"""Cookie names and attributes: `__Host-` prefixed and Secure outside development."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from starlette.responses import Response


@dataclass(frozen=True)
class CookiePolicy:
    secure: bool

    def name(self, base: str) -> str:
        # __Host- binds the cookie to this exact origin; browsers only accept it with Secure.
        return f"__Host-{base}" if self.secure else base

    def set(
        self,
        response: Response,
        base: str,
        value: str,
        *,
        max_age: int,
        samesite: Literal["lax", "strict"] = "lax",
    ) -> None:
        response.set_cookie(
            self.name(base),
            value,
            max_age=max_age,
            path="/",
            secure=self.secure,
            httponly=True,
            samesite=samesite,
        )

    def clear(self, response: Response, base: str) -> None:
        response.delete_cookie(self.name(base), path="/", secure=self.secure, httponly=True)


SESSION_COOKIE = "session"
CSRF_COOKIE = "csrf"
