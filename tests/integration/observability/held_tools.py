"""A tool package for tests: `held` waits, inside its call, until the test lets it go."""

from __future__ import annotations

import asyncio

from service.tools import ToolSet

tools = ToolSet()


class Hold:
    """The call in progress: `entered` once it runs, and it returns once `release` is set."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()


hold = Hold()


@tools.free(description="Waits until the test releases it.")
async def held() -> str:
    hold.entered.set()
    await hold.release.wait()
    return "released"
