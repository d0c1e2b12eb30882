"""Process-wide tuning for the `serve` entrypoint, applied around the app rather than inside it.

`create_app` touches no process-wide state, so several apps can start and stop in one process (the
tests do). The process `serve` runs holds one app, and there the collector is tuned once the
lifespan has started (`service/gc_tuning.py`), the loop's thread declares asyncio to sniffio
(`service/async_library.py`), and the loop makes tasks whose cancellation leaves no cycle
(`service/compat/anyio.py`); all are undone when the lifespan ends.
"""

from __future__ import annotations

from contextlib import ExitStack

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.async_library import declared_asyncio
from service.compat.anyio import lean_cancelled_tasks
from service.gc_tuning import tuned_gc
from service.settings import TuningSettings


class ProcessTuning:
    """Wraps the one app of a `serve` process; it passes every message through unchanged."""

    def __init__(self, app: ASGIApp, tuning: TuningSettings) -> None:
        self.app = app
        self._gc_freeze = tuning.gc_freeze
        self._gen0_threshold = tuning.gc_gen0_threshold
        self._lean_tasks = tuning.anyio_workarounds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        with ExitStack() as tuning:
            tuning.enter_context(declared_asyncio())
            if self._lean_tasks:
                tuning.enter_context(lean_cancelled_tasks())

            async def send_after_tuning(message: Message) -> None:
                # Freeze the heap the lifespan built, before the first request arrives.
                if message["type"] == "lifespan.startup.complete" and self._gc_freeze:
                    tuning.enter_context(tuned_gc(self._gen0_threshold))
                await send(message)

            await self.app(scope, receive, send_after_tuning)
