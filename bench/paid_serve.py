"""`python -m bench.paid_serve`: our service started as `paid-mcp-service serve` starts it.

The same entrypoint code as production (`service.cli`): `configure_logging` (the queue and its
writer thread, the settings' level and format), the draining uvicorn server, `ProcessTuning`,
uvicorn's access log off and its records through our handler. Settings come from BENCH_SETTINGS
(JSON) instead of the environment; BENCH_JSON=1 sets `mcp_json_response`; it serves on the bound
socket BENCH_FD the parent hands down, as `serve --fd` does, and `/metrics` on BENCH_METRICS_FD,
as `serve --metrics-fd` does. The one difference
from `serve`: idle keep-alive connections are kept for 120 s instead of 5, since the bench's
servers wait for their turn with their connections open.
"""

from __future__ import annotations

import json
import os

from bench import gc_probe

KEEP_ALIVE_SECONDS = 120


def main() -> int:
    from service.cli import _serve
    from service.settings import Settings

    gc_probe.install_from_environment()
    values = json.loads(os.environ["BENCH_SETTINGS"])
    if os.environ.get("BENCH_JSON") == "1":
        values["mcp_json_response"] = True
    settings = Settings(_env_file=None, **values)
    return _serve(
        settings,
        None,
        None,
        int(os.environ["BENCH_FD"]),
        metrics_fd=int(os.environ["BENCH_METRICS_FD"]),
        keep_alive_seconds=KEEP_ALIVE_SECONDS,
    )


if __name__ == "__main__":
    raise SystemExit(main())
