"""Shared HTML scaffolding for the hosted pages.

No scripts, no external resources: a nonce'd inline stylesheet and plain HTML forms, under a CSP
that forbids everything else. `form-action` must also list the origins the form's POST redirects
to (success/cancel/return URLs), because browsers enforce it across redirects.
"""

from __future__ import annotations

import html
import secrets
from urllib.parse import parse_qsl, urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse

from .money import format_amount

_STYLE = """
body{font-family:system-ui,sans-serif;background:#f6f9fc;color:#1a1f36;margin:0}
main{max-width:28rem;margin:2rem auto;background:#fff;padding:2rem;border-radius:8px;
box-shadow:0 2px 8px rgba(0,0,0,.08)}
label{display:block;font-size:.85rem;margin:.9rem 0 .3rem}
input{width:100%;box-sizing:border-box;padding:.55rem;border:1px solid #c9d1dc;border-radius:4px;
font-size:1rem}
.row{display:flex;gap:.5rem}.row>div{flex:1}
button{margin-top:1.2rem;width:100%;padding:.7rem;border:0;border-radius:4px;background:#635bff;color:#fff;
font-size:1rem;cursor:pointer}
button.secondary{background:#e3e8ee;color:#1a1f36}
.FieldError{color:#df1b41;margin-top:1rem}
.amount{font-size:1.6rem;font-weight:600}
.notice{background:#fff8e1;padding:.6rem;border-radius:4px}
a{color:#635bff}
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def money(amount: int, currency: str) -> str:
    return format_amount(amount, currency)


def _origin(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


def page(
    title: str, body: str, *, status: int = 200, redirect_targets: tuple[str | None, ...] = ()
) -> HTMLResponse:
    nonce = secrets.token_urlsafe(16)
    origins = sorted({origin for origin in (_origin(target) for target in redirect_targets) if origin})
    csp = (
        f"default-src 'none'; style-src 'nonce-{nonce}'; form-action 'self' {' '.join(origins)}".rstrip()
        + "; frame-ancestors 'none'; base-uri 'none'"
    )
    document = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f'<title>{esc(title)}</title><style nonce="{nonce}">{_STYLE}</style></head>'
        f"<body><main>{body}</main></body></html>"
    )
    return HTMLResponse(
        document,
        status_code=status,
        headers={
            "Content-Security-Policy": csp,
            "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store",
        },
    )


MAX_FORM_BYTES = 8192


async def read_form(request: Request) -> dict[str, str]:
    """A hosted page's url-encoded form; a body over `MAX_FORM_BYTES` counts as empty."""
    if int(request.headers.get("content-length") or 0) > MAX_FORM_BYTES:
        return {}
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return {}
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
