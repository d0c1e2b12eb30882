"""Known-device cookies: only ours, only for the account they name, only while they last."""

from __future__ import annotations

from service.identity.known_device import MAX_DEVICE_COOKIE_LENGTH, KnownDevices

DEVICES = KnownDevices("a secret key for tests", max_age_seconds=86_400)


def test_a_cookie_names_a_device_of_its_own_account_only() -> None:
    cookie = DEVICES.issue("alice")
    device = DEVICES.recognise(cookie, "alice")
    assert device is not None and device != DEVICES.recognise(DEVICES.issue("alice"), "alice")
    assert DEVICES.recognise(cookie, "bob") is None
    assert DEVICES.recognise(cookie, "Alice") is None


def test_a_forged_or_foreign_cookie_is_no_cookie() -> None:
    cookie = DEVICES.issue("alice")
    assert DEVICES.recognise(None, "alice") is None
    assert DEVICES.recognise("not a cookie", "alice") is None
    assert DEVICES.recognise(cookie[:-4] + ("AAAA" if cookie[-4:] != "AAAA" else "BBBB"), "alice") is None
    other_key = KnownDevices("another secret key", max_age_seconds=86_400)
    assert other_key.recognise(cookie, "alice") is None
    assert DEVICES.recognise(cookie + "x" * MAX_DEVICE_COOKIE_LENGTH, "alice") is None


def test_an_expired_cookie_is_no_cookie() -> None:
    expired = KnownDevices("a secret key for tests", max_age_seconds=-1)
    assert expired.recognise(expired.issue("alice"), "alice") is None
