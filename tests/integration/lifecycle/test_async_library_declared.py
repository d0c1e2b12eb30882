"""The service declares asyncio to sniffio for as long as it runs (`service/async_library.py`)."""

from __future__ import annotations

import sniffio

from tests.support.service import run_service


async def test_the_service_declares_asyncio_while_it_runs(database_url: str) -> None:
    assert sniffio.thread_local.name is None
    async with run_service(database_url) as service:
        assert sniffio.thread_local.name == "asyncio"
        async with service.http() as http:
            assert (await http.get("/healthz")).status_code == 200
    assert sniffio.thread_local.name is None, "shutdown takes the declaration back"
