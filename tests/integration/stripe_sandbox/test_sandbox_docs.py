"""docs/stripe-sandbox.md lists every route the sandbox serves, with what it implements."""

from __future__ import annotations

from pathlib import Path

from stripe_sandbox.app import create_sandbox_app
from stripe_sandbox.config import SandboxConfig
from stripe_sandbox.params_implemented import IMPLEMENTED

DOC = Path(__file__).resolve().parents[3] / "docs" / "stripe-sandbox.md"


def test_every_api_route_is_documented_with_its_parameters() -> None:
    text = DOC.read_text(encoding="utf-8")
    app = create_sandbox_app(SandboxConfig())
    routes = {
        f"{method} {path}"
        for route in app.routes
        for path in [getattr(route, "path", "")]
        if path.startswith("/v1/") and "{rest" not in path
        for method in getattr(route, "methods", set()) - {"HEAD"}
    }
    assert routes, "no API routes found"
    for route in sorted(routes):
        assert f"`{route}`" in text, f"{route} is missing from docs/stripe-sandbox.md"
    for route, patterns in IMPLEMENTED.items():
        assert route in routes, f"{route} is in params_implemented but not served"
        line = next(line for line in text.splitlines() if line.startswith(f"| `{route}` |"))
        for pattern in patterns:
            if pattern not in ("limit", "starting_after", "ending_before") and not pattern.startswith(
                "created"
            ):
                assert f"`{pattern}`" in line, f"{route}: {pattern} is not documented"
