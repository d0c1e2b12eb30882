"""Sign-in cannot starve the service: bounded hashing off the database, throttled failures, audit rows,
and the client address that throttling and audit rows use."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import event, update
from sqlalchemy.ext.asyncio import AsyncEngine

from service.audit.models import AuditEvent
from service.audit.service import AuditKind, record
from service.db.metadata import utcnow
from service.identity.known_device import DEVICE_COOKIE
from service.identity.models import BrowserSession
from tests.support.polling import until
from tests.support.service import DEFAULT_PASSWORD, RunningService, run_service

# argon2-cffi's defaults, as in production: a check takes long enough that concurrent sign-ins overlap.
REAL_HASHING = {
    "password_hash_time_cost": 3,
    "password_hash_memory_kib": 64 * 1024,
    "password_hash_parallelism": 4,
}
NO_THROTTLE = {"sign_in_account_failures": 1000, "sign_in_ip_failures": 10_000}


async def login_form(http: httpx.AsyncClient) -> dict[str, str]:
    """The login page's hidden fields; the CSRF cookie it sets stays in `http`."""
    page = await http.get("/login?next=/account")
    assert page.status_code == 200
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text))


async def post_login(
    http: httpx.AsyncClient, fields: dict[str, str], username: str, password: str, **headers: str
) -> httpx.Response:
    return await http.post(
        "/login", data={**fields, "username": username, "password": password}, headers=headers
    )


async def audit_details(service: RunningService, kind: AuditKind) -> list[tuple[str | None, dict[str, Any]]]:
    rows = await service.rows(AuditEvent, kind=kind.value)
    return [(row.user_id, json.loads(row.detail)) for row in rows]


async def test_a_flood_beyond_the_hashing_queue_is_refused_with_retry_after(database_url: str) -> None:
    settings = {**REAL_HASHING, **NO_THROTTLE, "password_hash_concurrency": 1, "password_hash_queue": 2}
    async with run_service(database_url, **settings) as service:
        await service.add_user("victim")
        async with httpx.AsyncClient(base_url=service.base_url, timeout=60.0) as http:
            fields = await login_form(http)
            flood = [post_login(http, fields, "victim", f"guess {n}") for n in range(24)]
            readyz = http.get("/readyz")
            *answers, ready = await asyncio.gather(*flood, readyz)
    statuses = [answer.status_code for answer in answers]
    assert set(statuses) <= {401, 503}, statuses
    refused = [answer for answer in answers if answer.status_code == 503]
    assert refused, statuses
    assert all(int(answer.headers["retry-after"]) >= 1 for answer in refused)
    assert ready.status_code == 200


@contextmanager
def connection_holders(engine: AsyncEngine) -> Iterator[dict[int, asyncio.Task[Any] | None]]:
    """The task holding each checked-out connection of the engine's pool, kept up to date."""
    holders: dict[int, asyncio.Task[Any] | None] = {}

    def checkout(_dbapi: object, record: object, _proxy: object) -> None:
        holders[id(record)] = asyncio.current_task()

    def checkin(_dbapi: object, record: object) -> None:
        holders.pop(id(record), None)

    pool = engine.sync_engine.pool
    event.listen(pool, "checkout", checkout)
    event.listen(pool, "checkin", checkin)
    try:
        yield holders
    finally:
        event.remove(pool, "checkout", checkout)
        event.remove(pool, "checkin", checkin)


def runs_login(task: asyncio.Task[Any] | None) -> bool:
    return task is not None and any(frame.f_code.co_name == "login_submit" for frame in task.get_stack())


async def test_the_password_check_holds_no_database_connection(database_url: str) -> None:
    async with run_service(database_url, **{**REAL_HASHING, "password_hash_time_cost": 8}) as service:
        await service.add_user("patient")
        passwords, engine = service.runtime.passwords, service.runtime.engine
        with connection_holders(engine) as holders:
            async with service.http() as http:
                fields = await login_form(http)
                login = asyncio.create_task(post_login(http, fields, "patient", DEFAULT_PASSWORD))

                async def hashing() -> bool:
                    return passwords.computing > 0

                await until(hashing, "the sign-in reached the password check")
                # Same event-loop tick as the observation above: the check is under way right now.
                assert not [task for task in holders.values() if runs_login(task)]
                # Meanwhile everything else still gets the database: a write commits.
                async with service.runtime.sessions() as session, session.begin():
                    await record(session, AuditKind.RATE_LIMITED, user_id=None)
                assert (await login).status_code == 303


async def test_after_k_failures_even_the_right_password_is_refused(database_url: str) -> None:
    async with run_service(database_url, sign_in_account_failures=3) as service:
        victim = await service.add_user("victim")
        async with service.http() as http:
            fields = await login_form(http)
            for n in range(3):
                assert (await post_login(http, fields, "victim", f"guess {n}")).status_code == 401
            locked = await post_login(http, fields, "victim", DEFAULT_PASSWORD)
        assert locked.status_code == 429
        assert int(locked.headers["retry-after"]) >= 1
        assert "Too many failed sign-ins" in locked.text
        assert "set-cookie" not in locked.headers or "session=" not in locked.headers["set-cookie"]
        failures = await audit_details(service, AuditKind.SIGN_IN_FAILED)
        assert failures == [(victim.id, {"client_ip": "127.0.0.1", "unknown_user": False})] * 3


async def test_failures_from_one_address_lock_it_out_for_every_account(database_url: str) -> None:
    async with run_service(database_url, sign_in_ip_failures=4) as service:
        await service.add_user("mallory")
        async with service.http() as http:
            fields = await login_form(http)
            for n in range(4):
                assert (await post_login(http, fields, f"nobody{n}", "a wrong guess")).status_code == 401
            locked = await post_login(http, fields, "mallory", DEFAULT_PASSWORD)
        assert locked.status_code == 429 and "retry-after" in locked.headers
        failures = await audit_details(service, AuditKind.SIGN_IN_FAILED)
        assert failures == [(None, {"client_ip": "127.0.0.1", "unknown_user": True})] * 4
        assert "nobody" not in json.dumps(failures)  # unknown names are not stored


async def test_failed_token_requests_are_throttled_and_audited(database_url: str) -> None:
    async with run_service(database_url, sign_in_ip_failures=2) as service, service.http() as http:
        registered = await http.post(
            "/register",
            json={"redirect_uris": ["http://127.0.0.1:9/cb"], "token_endpoint_auth_method": "none"},
        )
        assert registered.status_code == 201, registered.text
        guess = {
            "grant_type": "authorization_code",
            "client_id": registered.json()["client_id"],
            "code": "mcp_code_guessed",
            "redirect_uri": "http://127.0.0.1:9/cb",
            "code_verifier": "v" * 64,
        }
        for _ in range(2):
            assert (await http.post("/token", data=guess)).status_code == 400
        locked = await http.post("/token", data=guess)
        assert locked.status_code == 429, locked.text
        assert int(locked.headers["retry-after"]) >= 1
        refused = await audit_details(service, AuditKind.TOKEN_REQUEST_REFUSED)
        assert refused == [(None, {"client_ip": "127.0.0.1", "status": 400})] * 2


async def test_a_known_browser_signs_in_while_a_strangers_failures_lock_the_account(
    database_url: str,
) -> None:
    settings = {"trusted_proxies": ["127.0.0.1/32"], "sign_in_account_failures": 3}
    async with run_service(database_url, **settings) as service:
        await service.add_user("alice")
        await service.add_user("bob")
        home, away = {"X-Forwarded-For": "198.51.100.2"}, {"X-Forwarded-For": "203.0.113.9"}
        async with service.http() as alice, service.http() as bob, service.http() as stranger:
            alice_form, bob_form, stranger_form = [await login_form(http) for http in (alice, bob, stranger)]
            assert (await post_login(alice, alice_form, "alice", DEFAULT_PASSWORD, **home)).status_code == 303
            assert (await post_login(bob, bob_form, "bob", DEFAULT_PASSWORD, **home)).status_code == 303
            device = alice.cookies.get(DEVICE_COOKIE) or ""
            for n in range(3):
                guess = await post_login(stranger, stranger_form, "alice", f"guess {n}", **away)
                assert guess.status_code == 401
            # Without a known-device cookie the account stays locked, from any address.
            for headers in (away, home):
                locked = await post_login(stranger, stranger_form, "alice", DEFAULT_PASSWORD, **headers)
                assert locked.status_code == 429 and int(locked.headers["retry-after"]) >= 1
            # Alice's browser, known for her account, still signs in.
            again = await post_login(alice, alice_form, "alice", DEFAULT_PASSWORD, **home)
            assert again.status_code == 303 and again.headers["location"] == "/account"
            # Bob's browser is known for bob only, and a tampered cookie is no cookie at all.
            assert (await post_login(bob, bob_form, "alice", DEFAULT_PASSWORD, **home)).status_code == 429
            assert len(device) > 8
            stranger.cookies.set(DEVICE_COOKIE, device[:-4] + ("AAAA" if device[-4:] != "AAAA" else "BBBB"))
            forged = await post_login(stranger, stranger_form, "alice", DEFAULT_PASSWORD, **home)
            assert forged.status_code == 429
            # A known browser has its own limit: its own failures lock it out, and only it.
            for n in range(3):
                assert (await post_login(alice, alice_form, "alice", f"typo {n}", **home)).status_code == 401
            assert (await post_login(alice, alice_form, "alice", DEFAULT_PASSWORD, **home)).status_code == 429
            assert (await post_login(bob, bob_form, "bob", DEFAULT_PASSWORD, **home)).status_code == 303


async def test_concurrent_wrong_passwords_get_no_more_checks_than_the_account_limit(
    database_url: str,
) -> None:
    async with run_service(database_url, sign_in_account_failures=3, password_hash_queue=100) as service:
        await service.add_user("victim")
        async with service.http() as http:
            fields = await login_form(http)
            guesses = [post_login(http, fields, "victim", f"guess {n}") for n in range(20)]
            answers = await asyncio.gather(*guesses)
        statuses = Counter(answer.status_code for answer in answers)
        assert set(statuses) <= {401, 429} and 1 <= statuses[401] <= 3, statuses
        assert all(int(answer.headers["retry-after"]) >= 1 for answer in answers if answer.status_code == 429)
        # Only the passwords actually checked left a `sign_in_failed` row.
        assert len(await audit_details(service, AuditKind.SIGN_IN_FAILED)) == statuses[401]


async def test_concurrent_refused_token_requests_get_no_further_than_the_address_limit(
    database_url: str,
) -> None:
    async with run_service(database_url, sign_in_ip_failures=5) as service, service.http() as http:
        registered = await http.post(
            "/register",
            json={"redirect_uris": ["http://127.0.0.1:9/cb"], "token_endpoint_auth_method": "none"},
        )
        assert registered.status_code == 201, registered.text
        guess = {
            "grant_type": "authorization_code",
            "client_id": registered.json()["client_id"],
            "code": "mcp_code_guessed",
            "redirect_uri": "http://127.0.0.1:9/cb",
            "code_verifier": "v" * 64,
        }
        answers = await asyncio.gather(*(http.post("/token", data=guess) for _ in range(40)))
        statuses = Counter(answer.status_code for answer in answers)
        assert set(statuses) <= {400, 429} and 1 <= statuses[400] <= 5, statuses
        assert all(int(answer.headers["retry-after"]) >= 1 for answer in answers if answer.status_code == 429)
        # Refusals beyond the limit were not handled, so they left no audit row either.
        refused = await audit_details(service, AuditKind.TOKEN_REQUEST_REFUSED)
        assert refused == [(None, {"client_ip": "127.0.0.1", "status": 400})] * statuses[400]


async def _failed_login_ip(service: RunningService, forwarded_for: str) -> str:
    async with service.http() as http:
        fields = await login_form(http)
        answer = await post_login(
            http, fields, "nobody", "a wrong guess", **{"X-Forwarded-For": forwarded_for}
        )
    assert answer.status_code == 401
    details = await audit_details(service, AuditKind.SIGN_IN_FAILED)
    client_ip: str = details[-1][1]["client_ip"]
    return client_ip


async def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(database_url: str) -> None:
    async with run_service(database_url) as service:
        assert await _failed_login_ip(service, "6.6.6.6") == "127.0.0.1"


async def test_x_forwarded_for_from_a_trusted_proxy_names_the_client_if_it_is_an_address(
    database_url: str,
) -> None:
    async with run_service(database_url, trusted_proxies=["127.0.0.1/32"]) as service:
        assert await _failed_login_ip(service, "203.0.113.7") == "203.0.113.7"
        assert await _failed_login_ip(service, "6.6.6.6, 203.0.113.8") == "203.0.113.8"
        assert await _failed_login_ip(service, "<script>alert(1)</script>") == "127.0.0.1"


async def test_throttling_keys_on_the_forwarded_client(database_url: str) -> None:
    """Behind a trusted proxy one attacker's lockout does not lock out the proxy's other clients."""
    async with run_service(database_url, trusted_proxies=["127.0.0.1"], sign_in_ip_failures=2) as service:
        await service.add_user("innocent")
        async with service.http() as http:
            fields = await login_form(http)
            attacker = {"X-Forwarded-For": "198.51.100.1"}
            for n in range(2):
                assert (
                    await post_login(http, fields, f"x{n}", "a wrong guess", **attacker)
                ).status_code == 401
            assert (await post_login(http, fields, "x", "a wrong guess", **attacker)).status_code == 429
            neighbour = {"X-Forwarded-For": "198.51.100.2"}
            assert (
                await post_login(http, fields, "innocent", DEFAULT_PASSWORD, **neighbour)
            ).status_code == 303


async def test_a_username_with_a_nul_is_an_unknown_user(database_url: str) -> None:
    async with run_service(database_url) as service:
        await service.add_user("alice")
        async with service.http() as http:
            fields = await login_form(http)
            refused = await post_login(http, fields, "al\x00ice", DEFAULT_PASSWORD)
        assert refused.status_code == 401
        assert "Wrong username or password." in refused.text
        failures = await audit_details(service, AuditKind.SIGN_IN_FAILED)
        assert failures == [(None, {"client_ip": "127.0.0.1", "unknown_user": True})]


@pytest.mark.parametrize("client_id", ["a\x00b", "c" * 65], ids=["nul", "over-long"])
async def test_an_impossible_client_id_is_an_unknown_client(database_url: str, client_id: str) -> None:
    async with run_service(database_url, sign_in_ip_failures=2) as service, service.http() as http:
        unknown = {"client_id": "never-registered", "token": "t", "grant_type": "refresh_token"}
        impossible = {**unknown, "client_id": client_id, "refresh_token": "r"}
        for path in ("/revoke", "/token"):
            expected = await http.post(path, data=unknown)
            answer = await http.post(path, data=impossible)
            assert (answer.status_code, answer.json()["error"]) == (
                expected.status_code,
                expected.json()["error"],
            ), path
        # Both refused /token requests counted against the address, as any unknown client does.
        assert (await http.post("/token", data=impossible)).status_code == 429
        query = {"response_type": "code", "code_challenge": "x" * 43, "client_id": client_id}
        authorized = await http.get("/authorize", params=query)
        assert authorized.status_code == 400
        assert "(invalid_request: " in authorized.text


async def test_live_browser_sessions_per_user_are_capped(database_url: str) -> None:
    async with run_service(database_url, max_browser_sessions_per_user=3) as service:
        await service.add_user("alice")
        browsers = [service.http() for _ in range(5)]
        try:
            forms = [await login_form(browser) for browser in browsers]
            for browser, form in zip(browsers, forms, strict=True):
                signed_in = await post_login(browser, form, "alice", DEFAULT_PASSWORD)
                assert signed_in.status_code == 303
            assert len(await service.rows(BrowserSession)) == 3
            # The two oldest sessions were ended; the three newest still work.
            accounts = [(await browser.get("/account")).status_code for browser in browsers]
            assert accounts == [303, 303, 200, 200, 200]
            # The same browser signing in again ends the session its cookie held.
            again = browsers[4]
            before = {row.id_hash for row in await service.rows(BrowserSession)}
            assert (await post_login(again, forms[4], "alice", DEFAULT_PASSWORD)).status_code == 303
            after = {row.id_hash for row in await service.rows(BrowserSession)}
            assert len(after) == 3 and len(before - after) == 1
            assert [(await browser.get("/account")).status_code for browser in browsers[2:]] == [200] * 3
        finally:
            for browser in browsers:
                await browser.aclose()


async def test_a_new_browser_session_survives_sessions_stamped_by_a_clock_ahead(database_url: str) -> None:
    async with run_service(database_url, max_browser_sessions_per_user=2) as service:
        await service.add_user("alice")
        browsers = [service.http() for _ in range(3)]
        try:
            forms = [await login_form(browser) for browser in browsers]
            for browser, form in zip(browsers[:2], forms, strict=False):
                assert (await post_login(browser, form, "alice", DEFAULT_PASSWORD)).status_code == 303
            # Two sessions made on a replica whose clock runs an hour ahead of this one's.
            async with service.runtime.sessions() as session, session.begin():
                await session.exec(update(BrowserSession).values(created_at=utcnow() + timedelta(hours=1)))
            assert (await post_login(browsers[2], forms[2], "alice", DEFAULT_PASSWORD)).status_code == 303
            assert len(await service.rows(BrowserSession)) == 2
            # The browser that just signed in stays signed in; one of the other two was ended.
            assert (await browsers[2].get("/account")).status_code == 200
            accounts = sorted([(await browser.get("/account")).status_code for browser in browsers[:2]])
            assert accounts == [200, 303]
        finally:
            for browser in browsers:
                await browser.aclose()
