"""The app class whose hot paths skip FastAPI: `/mcp` requests go straight to the MCP app, Stripe's
webhook deliveries straight to their endpoint.

Every tool call is one request to `/mcp`. FastAPI would first ask OpenTelemetry whether anyone is
listening (three provider lookups, each reading the environment), then run its error, telemetry
and body-limit middleware and its route table, only to land on the catch-all mount, whose MCP app
has error handling of its own. Everything else still goes through FastAPI.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

# The service exports no OpenTelemetry data; without this FastAPI checks for a provider per request.
NO_TELEMETRY: dict[str, Any] = {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}


class ServiceApp(FastAPI):
    def __init__(self, *, fast_paths: dict[str, ASGIApp] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("telemetry", NO_TELEMETRY)
        super().__init__(**kwargs)
        self.fast_paths = dict(fast_paths or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            target = self.fast_paths.get(scope["path"])
            if target is not None:
                scope["app"] = self  # as Starlette sets it: `request.app` reaches the runtime
                await target(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
