"""`SecurityHeadersMiddleware`: ours are added where a response lacks them, never over its own."""

from __future__ import annotations

from starlette.types import Message, Receive, Scope, Send

from service.web.security_headers import CONTENT_SECURITY_POLICY, SecurityHeadersMiddleware


async def answer(headers: list[tuple[bytes, bytes]], *, hsts: bool = False) -> dict[bytes, list[bytes]]:
    """The response headers an app sending `headers` ends up with, behind the middleware."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    await SecurityHeadersMiddleware(app, hsts=hsts)({"type": "http"}, receive, send)
    found: dict[bytes, list[bytes]] = {}
    for name, value in sent[0]["headers"]:
        found.setdefault(name, []).append(value)
    return found


async def test_a_response_without_them_gets_all_of_ours_once() -> None:
    headers = await answer([(b"content-type", b"application/json")])
    assert headers[b"content-security-policy"] == [CONTENT_SECURITY_POLICY.encode()]
    assert headers[b"x-content-type-options"] == [b"nosniff"]
    assert headers[b"x-frame-options"] == [b"DENY"]
    assert headers[b"referrer-policy"] == [b"no-referrer"]
    assert headers[b"cross-origin-opener-policy"] == [b"same-origin"]
    assert b"strict-transport-security" not in headers
    assert b"cache-control" not in headers, "only HTML is kept out of caches"


async def test_a_responses_own_values_win() -> None:
    headers = await answer([(b"X-Frame-Options", b"SAMEORIGIN"), (b"content-security-policy", b"x")])
    assert headers[b"X-Frame-Options"] == [b"SAMEORIGIN"] and b"x-frame-options" not in headers
    assert headers[b"content-security-policy"] == [b"x"]


async def test_html_is_not_stored_unless_the_response_says_otherwise() -> None:
    html = (b"content-type", b"text/html; charset=utf-8")
    assert (await answer([html]))[b"cache-control"] == [b"no-store"]
    assert (await answer([html, (b"cache-control", b"max-age=60")]))[b"cache-control"] == [b"max-age=60"]


async def test_hsts_outside_development() -> None:
    headers = await answer([], hsts=True)
    assert headers[b"strict-transport-security"] == [b"max-age=63072000; includeSubDomains"]
