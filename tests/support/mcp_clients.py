"""SDK clients as the paywall tests need them: recording elicitations and completion notices."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types as t
import pytest
from mcp import Client, MCPError, UrlElicitationRequiredError
from mcp.client import ClientRequestContext, ClientSession, IncomingMessage
from mcp.client.streamable_http import streamable_http_client

ElicitAnswer = Callable[[t.ElicitRequestURLParams], Awaitable[t.ElicitResult]]


async def accept(_: t.ElicitRequestURLParams) -> t.ElicitResult:
    return t.ElicitResult(action="accept")


async def call_expecting_32042(client: Any, tool: str, args: dict[str, Any]) -> t.ElicitRequestURLParams:
    """Call a paid tool unpaid on a 2025-11-25 session; the one URL elicitation of its -32042 error."""
    with pytest.raises(MCPError) as raised:
        await client.call_tool(tool, args)
    assert raised.value.code == -32042
    elicitations = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
    assert len(elicitations) == 1
    assert elicitations[0].mode == "url"
    return elicitations[0]


def payment_url(asked: t.InputRequiredResult) -> str:
    """The URL of a 2026-07-28 InputRequiredResult's payment elicitation."""
    request = (asked.input_requests or {})["payment"]
    assert isinstance(request, t.ElicitRequest) and isinstance(request.params, t.ElicitRequestURLParams)
    return request.params.url


@dataclass
class ClientProbe:
    """What one client saw: URL elicitation requests and completion notifications."""

    answer: ElicitAnswer = accept
    url_requests: list[t.ElicitRequestURLParams] = field(default_factory=list)
    form_requests: int = 0
    completed: list[str] = field(default_factory=list)
    _completion: asyncio.Event = field(default_factory=asyncio.Event)

    async def elicitation_callback(
        self, context: ClientRequestContext, params: t.ElicitRequestParams
    ) -> t.ElicitResult:
        if isinstance(params, t.ElicitRequestURLParams):
            self.url_requests.append(params)
            return await self.answer(params)
        self.form_requests += 1
        return t.ElicitResult(action="decline")

    async def message_handler(self, message: IncomingMessage) -> None:
        if isinstance(message, t.ElicitCompleteNotification):
            self.completed.append(message.params.elicitation_id)
            self._completion.set()

    async def wait_for_completion(self, seconds: float = 20.0) -> str:
        async with asyncio.timeout(seconds):
            await self._completion.wait()
        return self.completed[-1]


class FormOnlySession(ClientSession):
    """Declares `{"elicitation": {"form": {}}}`: the SDK offers no public switch for form-only."""

    def _build_capabilities(self, version: str) -> t.ClientCapabilities:
        capabilities = super()._build_capabilities(version)
        return capabilities.model_copy(
            update={"elicitation": t.ElicitationCapability(form=t.FormElicitationCapability())}
        )


@asynccontextmanager
async def bearer_transport(
    mcp_url: str, token: str, http_timeout: httpx2.Timeout | float = 30.0
) -> AsyncIterator[Any]:
    """Streamable HTTP with a bearer token, closing its HTTP client: the SDK leaves a given one open."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=http_timeout) as http,
        streamable_http_client(mcp_url, http_client=http) as streams,
    ):
        yield streams


def probed_client(
    mcp_url: str, token: str, probe: ClientProbe, *, form_only: bool = False, **kwargs: Any
) -> Client:
    client = Client(
        bearer_transport(mcp_url, token, httpx2.Timeout(30, read=300)),
        elicitation_callback=probe.elicitation_callback,
        message_handler=probe.message_handler,
        **kwargs,
    )
    if form_only:
        build = client._build_session

        async def build_form_only(exit_stack: Any) -> ClientSession:
            session = await build(exit_stack)
            session.__class__ = FormOnlySession
            return session

        client._build_session = build_form_only  # type: ignore[method-assign]
    return client
