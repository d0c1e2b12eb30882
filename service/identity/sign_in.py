"""Password sign-in as the login form does it: throttled, checked off the database, audited.

The throttle is consulted before any hashing, so a locked account or client costs no argon2 work
and no database round trip; a wrong password is counted against both and leaves an audit row. Each
attempt holds a place in the throttle while its password is checked, so concurrent guesses cannot
get more passwords checked than failures would allow. A browser carrying a known-device cookie for
the account is throttled per (account, device), so others' failures do not lock its owner out.
"""

from __future__ import annotations

from service.audit.service import AuditKind, record
from service.db.engine import SessionFactory
from service.identity import service as identity
from service.identity.known_device import KnownDevices
from service.identity.models import User
from service.identity.passwords import HashingBusy, PasswordHashing
from service.identity.throttle import SignInThrottle


class SignInRefused(Exception):
    """Not checked: the account or client is locked out (`throttled`) or hashing is saturated."""

    def __init__(self, *, retry_after_seconds: int, throttled: bool) -> None:
        super().__init__(retry_after_seconds, throttled)
        self.retry_after_seconds = retry_after_seconds
        self.throttled = throttled


class PasswordSignIn:
    def __init__(
        self,
        sessions: SessionFactory,
        passwords: PasswordHashing,
        throttle: SignInThrottle,
        devices: KnownDevices,
    ) -> None:
        self._sessions = sessions
        self._passwords = passwords
        self._throttle = throttle
        self.devices = devices

    async def attempt(
        self, username: str, password: str, client_ip: str | None, device_cookie: str | None = None
    ) -> User | None:
        """The user, or None for a wrong username or password; raises `SignInRefused`.

        `device_cookie` is the browser's known-device cookie; one not valid for `username` is ignored."""
        device = self.devices.recognise(device_cookie, username)
        attempt = self._throttle.reserve(account=username, client_ip=client_ip, device=device)
        if isinstance(attempt, int):
            raise SignInRefused(retry_after_seconds=attempt, throttled=True)
        try:
            user = await identity.authenticate(self._sessions, username, password, self._passwords)
        except HashingBusy as exc:
            attempt.release()
            raise SignInRefused(retry_after_seconds=exc.retry_after_seconds, throttled=False) from None
        except BaseException:
            attempt.release()  # an error or a cancellation decided nothing
            raise
        if user is not None:
            attempt.succeeded()
            return user
        attempt.failed()
        await self._audit_failure(username, client_ip)
        return None

    async def _audit_failure(self, username: str, client_ip: str | None) -> None:
        async with self._sessions() as session, session.begin():
            known = await identity.get_user_by_username(session, username)
            # An unknown name is not stored: people type their password into the username field.
            await record(
                session,
                AuditKind.SIGN_IN_FAILED,
                user_id=known.id if known else None,
                client_ip=client_ip,
                unknown_user=known is None,
            )
