"""What browser pages answer before their handlers run: a signed-out visitor is sent to sign in and
back, a form without its CSRF token gets its page's refusal, and an expired sign-in link is named first."""

from __future__ import annotations

from urllib.parse import urlencode

from tests.support.browserless import csrf_token, log_in_through_form
from tests.support.oauth import authorize, pkce_pair, query_of, register
from tests.support.service import DEFAULT_PASSWORD, RunningService


def login_for(path: str) -> str:
    return "/login?" + urlencode({"next": path})


async def test_signed_out_visitors_are_sent_to_sign_in_and_back(service: RunningService) -> None:
    async with service.http() as browser:
        for path in ("/account", "/billing"):
            page = await browser.get(path)
            assert page.status_code == 303
            assert page.headers["location"] == login_for(path)
        form = await browser.get("/login")
        restart = await browser.post("/pay/el_gone/restart", data={"csrf_token": csrf_token(form.text)})
    # A form's POST returns to the page the form is on.
    assert restart.status_code == 303
    assert restart.headers["location"] == login_for("/pay/el_gone")


async def test_forms_without_their_csrf_token_get_their_pages_refusal(service: RunningService) -> None:
    await service.add_user("gus")
    async with service.http() as browser:
        await log_in_through_form(browser, "/login", "gus", DEFAULT_PASSWORD)
        logout = await browser.post("/logout", data={})
        assert logout.status_code == 400
        assert "Sign out failed" in logout.text
        assert "signed in as gus" in (await browser.get("/account")).text
        portal = await browser.post("/billing", data={"csrf_token": "forged"})
        assert portal.status_code == 303
        assert portal.headers["location"] == login_for("/billing")
        credits = await browser.post("/pay/el_gone/credits", data={"pack_id": "calls_100"})
        assert credits.status_code == 400
        assert "Form expired" in credits.text
        assert 'href="/pay/el_gone"' in credits.text
        restart = await browser.post("/pay/el_gone/restart", data={})
        assert restart.status_code == 303
        assert restart.headers["location"] == login_for("/pay/el_gone")


async def test_consent_asks_to_sign_in_for_its_authorization(service: RunningService) -> None:
    await service.add_user("hal")
    async with service.http() as browser:
        client = await register(browser)
        to_login = await authorize(service, browser, client["client_id"], pkce_pair()[1])
        sealed = query_of(to_login.headers["location"])["authz"]
        consent = "/authorize/consent?" + urlencode({"authz": sealed})
        asked = await browser.get("/authorize/consent", params={"authz": sealed})
        assert asked.status_code == 303
        assert asked.headers["location"] == "/login?" + urlencode({"authz": sealed})
        form = await browser.get(asked.headers["location"])
        token = csrf_token(form.text)
        answered = await browser.post(
            "/authorize/consent", data={"authz": sealed, "decision": "allow", "csrf_token": token}
        )
        assert answered.status_code == 303
        assert answered.headers["location"] == consent
        await log_in_through_form(browser, asked.headers["location"], "hal", DEFAULT_PASSWORD)
        forged = await browser.post("/authorize/consent", data={"authz": sealed, "decision": "allow"})
        assert forged.status_code == 303
        assert forged.headers["location"] == consent


async def test_an_expired_sign_in_link_is_named_before_sign_in_or_csrf(service: RunningService) -> None:
    async with service.http() as browser:
        pages = [
            await browser.get("/authorize/consent", params={"authz": "expired"}),
            await browser.post("/authorize/consent", data={"authz": "expired", "decision": "allow"}),
            await browser.post("/login", data={"username": "x", "password": "y", "authz": "expired"}),
        ]
    for page in pages:
        assert page.status_code == 400
        assert "Sign-in link expired" in page.text


async def test_a_non_ascii_csrf_token_is_refused_like_any_forged_one(service: RunningService) -> None:
    await service.add_user("ida")
    forms = ["/login", "/logout", "/billing", "/pay/el_gone", "/pay/el_gone/credits", "/pay/el_gone/restart"]
    async with service.http() as browser:
        await log_in_through_form(browser, "/login", "ida", DEFAULT_PASSWORD)
        for path in forms:
            fields = {"username": "ida", "password": "wrong", "pack_id": "calls_100"}
            forged = await browser.post(path, data={**fields, "csrf_token": "forged"})
            accented = await browser.post(path, data={**fields, "csrf_token": "é"})
            assert accented.status_code == forged.status_code != 500, (path, accented.text)
            assert accented.headers.get("location") == forged.headers.get("location"), path
        assert "signed in as ida" in (await browser.get("/account")).text
