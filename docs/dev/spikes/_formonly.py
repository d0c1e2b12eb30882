# Helper (not a spike): an mcp.Client whose capability ad is {"elicitation": {"form": {}}} (form only).
# mcp.Client always advertises form+url when elicitation_callback is set; the only hook is the private
# ClientSession._build_capabilities, patched here on a subclass used via Client._build_session.
from __future__ import annotations

from typing import Any

import mcp_types as t
from _harness import client
from mcp import Client
from mcp.client.session import ClientSession


class FormOnlySession(ClientSession):
    def _build_capabilities(self, version: str) -> t.ClientCapabilities:
        caps = super()._build_capabilities(version)
        return caps.model_copy(update={"elicitation": t.ElicitationCapability(form=t.FormElicitationCapability())})


async def _form(ctx: Any, p: t.ElicitRequestParams) -> t.ElicitResult:
    assert not isinstance(p, t.ElicitRequestURLParams), "server sent URL mode to a form-only client!"
    return t.ElicitResult(action="decline")


def form_only_client(url: str, **kw: Any) -> Client:
    c = client(url, mode="legacy", elicitation_callback=_form, **kw)
    orig = c._build_session

    async def build(exit_stack):  # re-class the session the Client built (private API, tests only)
        s = await orig(exit_stack)
        s.__class__ = FormOnlySession
        return s
    c._build_session = build  # type: ignore[method-assign]
    return c
