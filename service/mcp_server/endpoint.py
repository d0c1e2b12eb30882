"""The SDK's `/mcp` endpoint, taken out of the SDK's Starlette app so tool calls can skip its shell.

Every tool call is one request to `/mcp`, already matched by path before it would reach the SDK's
app (`service/web/fast_path.py`). Through that app it would still pass Starlette's error
middleware, its exception middleware, the router and the route: each a coroutine frame that every
resumption of the call steps through, two of them wrapping `send`, all to reach the endpoint the
route holds. Called directly (behind the same authentication layer) the endpoint gives the same
answers: an exception before the response starts becomes uvicorn's 500 instead of Starlette's,
and the endpoint raises no `HTTPException` for the exception middleware to turn into a response.
"""

from __future__ import annotations

from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from starlette.applications import Starlette
from starlette.routing import Route


def sdk_endpoint(app: Starlette, path: str) -> RequireAuthMiddleware:
    """What the SDK's route for `path` calls. Fails loudly if the SDK's app is no longer built the
    way this expects: one route for the path, any method, the authenticated endpoint as is."""
    routes = [route for route in app.router.routes if isinstance(route, Route) and route.path == path]
    if len(routes) != 1:
        raise RuntimeError(f"the MCP app has {len(routes)} routes for {path}, not one")
    endpoint = routes[0].app
    if not isinstance(endpoint, RequireAuthMiddleware) or routes[0].methods is not None:
        raise RuntimeError(f"the SDK's {path} route no longer holds its authenticated endpoint as is")
    return endpoint
