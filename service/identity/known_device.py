"""Known-device cookies: a browser that signed in to an account gets one, signed, naming that account.

A sign-in that carries a valid one for the account it names is throttled on its own (account,
device) key, not on the account-wide one a stranger can fill with wrong passwords (OWASP's device
cookies). The cookie proves only a past sign-in from this browser; the password is still checked.
"""

from __future__ import annotations

import secrets

from itsdangerous import BadData, URLSafeTimedSerializer

DEVICE_COOKIE = "device"
# A cookie we sign is about 120 characters; anything much longer is not ours and is not verified.
MAX_DEVICE_COOKIE_LENGTH = 512


class KnownDevices:
    def __init__(self, secret_key: str, *, max_age_seconds: int) -> None:
        self._serializer = URLSafeTimedSerializer(secret_key, salt="known-device")
        self.max_age_seconds = max_age_seconds

    def issue(self, username: str) -> str:
        """A new cookie value for this browser, which just signed in as `username`."""
        return self._serializer.dumps([username, secrets.token_urlsafe(16)])

    def recognise(self, cookie: str | None, username: str) -> str | None:
        """The device's id if `cookie` is ours, unexpired and for `username`; else None (no device)."""
        if cookie is None or len(cookie) > MAX_DEVICE_COOKIE_LENGTH:
            return None
        try:
            data: object = self._serializer.loads(cookie, max_age=self.max_age_seconds)
        except BadData:
            return None
        match data:
            case [str(account), str(device)] if account == username:
                return device
            case _:
                return None
