"""A Starlette route that names itself in the request's scope, as FastAPI's own routes do.

The access line and `http_requests_total` label a request with `scope["route"]`'s path template.
FastAPI sets it for its `APIRoute`s only; `/mcp` (an ASGI app) and the Stripe webhook (a plain
request handler) are `TemplateRoute`s of the app, so they are labelled by their path too.
"""

from __future__ import annotations

from starlette.routing import Route
from starlette.types import Receive, Scope, Send


class TemplateRoute(Route):
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self
        await super().handle(scope, receive, send)
