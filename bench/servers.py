"""ASGI factories for the servers under test, each run by uvicorn in its own process.

    python -m bench.servers   (configured by BENCH_* environment variables)

which runs `create` as `uvicorn bench.servers:create --factory` would, on the already-bound socket
BENCH_FD the parent hands down (`bench/procs.py`), so no other process can take its port first.

- `bare`: a plain `mcp` `MCPServer` with the same `ascii_chart` function, no auth, no paywall, in a
  process where sniffio cannot be imported, as where `pip install mcp` alone installed the SDK
  (`bench/without_sniffio`; our service depends on sniffio, so the bench's environment has it).
- `bare-auth`: the same with a static bearer-token verifier (a dict lookup): separates the cost of
  authentication from the cost of the paywall.
- `paid` is not here: our service starts through its own `serve` code (`bench/paid_serve.py`).
- `sandbox`: the one Stripe sandbox all `paid*` servers talk to (`create_sandbox_app`), no webhook
  endpoints (the bench posts webhooks itself), nothing persisted.

The bare servers keep the SDK's defaults (`MCPServer`'s log level, INFO, which logs nothing per
tool call); BENCH_JSON=1 serves legacy requests with JSON responses (`json_response=True`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mcp.server import MCPServer
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from starlette.applications import Starlette

from bench import gc_probe
from service.example_tools.catalog import ascii_chart

STATIC_TOKEN = "bench-static-token"  # noqa: S105 - a loopback benchmark's fixed credential


class StaticTokenVerifier:
    """`mcp.server.auth.provider.TokenVerifier`: one fixed token, no I/O."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token != STATIC_TOKEN:
            return None
        return AccessToken(token=token, client_id="bench", scopes=[], subject="bench-user")


def _json_response() -> bool:
    return os.environ.get("BENCH_JSON") == "1"


def bare_app(*, with_auth: bool) -> Starlette:
    port = int(os.environ["BENCH_PORT"])
    kwargs: dict[str, Any] = {}
    if with_auth:
        base = f"http://127.0.0.1:{port}"
        kwargs["token_verifier"] = StaticTokenVerifier()
        kwargs["auth"] = AuthSettings.model_validate(
            {"issuer_url": base, "resource_server_url": f"{base}/mcp", "validate_token_resource": False}
        )
    server = MCPServer("bench-bare", **kwargs)
    server.add_tool(ascii_chart, description="Draw a horizontal bar chart of numbers as plain text.")
    return server.streamable_http_app(json_response=_json_response())


def sandbox_app() -> Any:
    from stripe_sandbox import SandboxConfig, create_sandbox_app

    port = int(os.environ["BENCH_PORT"])
    return create_sandbox_app(SandboxConfig(public_base_url=f"http://127.0.0.1:{port}", persist_path=None))


def create() -> Any:
    gc_probe.install_from_environment()
    kind = os.environ["BENCH_KIND"]
    if kind in ("bare", "bare-auth"):
        app = bare_app(with_auth=kind == "bare-auth")
        if "sniffio" in sys.modules:
            raise RuntimeError("a bare SDK server runs without sniffio: see bench.procs.WITHOUT_SNIFFIO")
        return app
    if kind == "sandbox":
        return sandbox_app()
    raise ValueError(f"unknown BENCH_KIND {kind!r}")


def main() -> None:
    """uvicorn's own `run`, on the inherited socket: a listener made with an explicit TCP protocol,
    which uvicorn's `--fd` (read as a Unix socket) would lose, and with it Nagle off on accepted
    connections."""
    import uvicorn

    from service.web.inherited_socket import inherited_listener

    listener = inherited_listener(int(os.environ["BENCH_FD"]))
    config = uvicorn.Config(
        "bench.servers:create",
        factory=True,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
        # Interleaved throughput leaves a server's connections idle while the others take turns.
        timeout_keep_alive=120,
    )
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    main()
