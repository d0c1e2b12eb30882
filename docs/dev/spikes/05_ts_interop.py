# Proves Q8: the TS SDK 1.32 client (2025-11-25) gets -32042 as UrlElicitationRequiredError, receives
# notifications/elicitation/complete, handles elicitation/create (url) + progress; form-only gets link text.
# Run: mkdir -p /tmp/ts-spike && (cd /tmp/ts-spike && npm init -y && npm i @modelcontextprotocol/sdk@1.32)
#      then .venv/bin/python docs/dev/spikes/05_ts_interop.py   (TS_SPIKE_DIR overrides /tmp/ts-spike)
from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil

import anyio

here = pathlib.Path(__file__).parent
spec = importlib.util.spec_from_file_location("legacy", here / "02_legacy_url_elicitation.py")
legacy = importlib.util.module_from_spec(spec)
spec.loader.exec_module(legacy)  # reuse the server app of spike 02 (not its main)
from _harness import serve  # noqa: E402

TS_DIR = pathlib.Path(os.environ.get("TS_SPIKE_DIR", "/tmp/ts-spike"))


async def main() -> None:
    shutil.copy(here / "ts_client.mjs", TS_DIR / "ts_client.mjs")  # ESM resolves packages next to the script
    async with serve(legacy.app) as base:
        for token, modes in (("tok-dave", "url"), ("tok-erin", "form")):
            print(f"--- node client {token} declaring {modes}")
            r = await anyio.run_process(["node", "ts_client.mjs", f"{base}/mcp", token, base, modes], cwd=TS_DIR,
                                        check=False)
            print(r.stdout.decode(), r.stderr.decode()[-2000:], "exit", r.returncode)


anyio.run(main)
