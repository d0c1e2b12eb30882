"""Pure ASGI middleware that adds strict security headers to every response that lacks them."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# form-action is deliberately absent: Chromium applies it to the redirects that follow a form
# POST, which would block the hand-off to an OAuth client's redirect URI and to Stripe Checkout.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'"
)

# OAuth endpoints whose answers carry secrets (a client secret, tokens) get `no-store` unless they
# set their own Cache-Control (RFC 6749 §5.1, RFC 7591 §3.2.1).
SECRET_ANSWERING_PATHS = frozenset({"/register", "/token"})


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp, *, hsts: bool) -> None:
        self.app = app
        ours = {
            "content-security-policy": CONTENT_SECURITY_POLICY,
            "x-content-type-options": "nosniff",
            "x-frame-options": "DENY",
            "referrer-policy": "no-referrer",
            "cross-origin-opener-policy": "same-origin",
        }
        if hsts:
            ours["strict-transport-security"] = "max-age=63072000; includeSubDomains"
        self._ours = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in ours.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        no_store = scope.get("path") in SECRET_ANSWERING_PATHS

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = self.completed(message.get("headers", ()), no_store=no_store)
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def completed(
        self, headers: Iterable[tuple[bytes, bytes]], *, no_store: bool = False
    ) -> list[tuple[bytes, bytes]]:
        """The response's raw headers plus each of ours it lacks (and `no-store` on HTML, or on any
        response when `no_store`)."""
        raw = list(headers)
        present = {name.lower() for name, _ in raw}
        raw.extend(pair for pair in self._ours if pair[0] not in present)
        if b"cache-control" not in present and (
            no_store
            or any(name.lower() == b"content-type" and value.startswith(b"text/html") for name, value in raw)
        ):
            raw.append((b"cache-control", b"no-store"))
        return raw
