# Proves Q2c-Q4,Q6 on 2025-11-25 (mode="legacy"): -32042 + later notifications/elicitation/complete sent from OUTSIDE
# the handler via a kept ServerSession; elicitation/create (url) mid-call + progress; form-only client never gets url.
# Run: .venv/bin/python docs/dev/spikes/02_legacy_url_elicitation.py
from __future__ import annotations

import contextlib
import uuid

import anyio
import httpx
import mcp_types as t
from _harness import StaticTokenVerifier, auth_settings, client, serve
from fastapi import FastAPI
from mcp import MCPError, UrlElicitationRequiredError
from mcp.client.session import ClientRequestContext
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.session import ServerSession

mcp = MCPServer("paid-mcp", token_verifier=StaticTokenVerifier(), auth=auth_settings(), log_level="WARNING")
PENDING: dict[str, tuple[ServerSession, anyio.Event]] = {}  # elicitation id -> (session that started it, paid event)
PAID: set[str] = set()  # users with entitlement


def url_capable(ctx: Context) -> bool:
    caps = ctx.client_capabilities
    return bool(caps and caps.elicitation and caps.elicitation.url is not None)


@mcp.tool()
async def paid_32042(ctx: Context) -> t.CallToolResult:  # a returned CallToolResult passes through unchanged
    user = get_access_token().subject  # type: ignore[union-attr]
    if user in PAID:
        return t.CallToolResult(content=[t.TextContent(type="text", text=f"premium result for {user}")])
    eid = uuid.uuid4().hex
    if not url_capable(ctx):  # form-only / no elicitation: a tool error result with the link, never URL mode
        # (raising ValueError would hide the text: "Error executing tool paid_32042"; ToolError prefixes it)
        text = f"Payment required: open http://pay.example/pay/{eid} then call again"
        return t.CallToolResult(content=[t.TextContent(type="text", text=text)], is_error=True)
    PENDING[eid] = (ctx.session, anyio.Event())  # keep the per-request ServerSession; its connection outlives the call
    raise UrlElicitationRequiredError([t.ElicitRequestURLParams(
        message="Subscribe to Pro (9.00 EUR/month)", url=f"http://pay.example/pay/{eid}", elicitation_id=eid)])


@mcp.tool()
async def paid_create(ctx: Context) -> str:
    user = get_access_token().subject  # type: ignore[union-attr]
    eid = uuid.uuid4().hex
    PENDING[eid] = (ctx.session, paid := anyio.Event())
    r = await ctx.elicit_url("Subscribe to Pro", f"http://pay.example/pay/{eid}", eid)
    if r.action != "accept":
        return f"not subscribed ({r.action})"
    with anyio.move_on_after(30):  # bounded wait, with progress on the POST's SSE stream
        i = 0
        while not paid.is_set():
            i += 1
            await ctx.report_progress(i, None, "waiting for payment")
            with anyio.move_on_after(0.2):
                await paid.wait()
    return f"premium result for {user}" if paid.is_set() else "timed out waiting for payment"


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    async with mcp.session_manager.run():
        yield


mcp_asgi = mcp.streamable_http_app()
app = FastAPI(lifespan=lifespan)


@app.post("/fake-webhook/{eid}")  # stands in for the Stripe webhook: runs outside any MCP request
async def webhook(eid: str, user: str) -> dict[str, str]:
    PAID.add(user)
    session, paid = PENDING.pop(eid)
    paid.set()
    await session.send_elicit_complete(eid)  # no related_request_id => connection's standalone GET stream
    return {"completed": eid}


app.mount("/", mcp_asgi)


async def main() -> None:
    async with serve(app) as base:
        got: list[str] = []
        other: list[str] = []
        done = anyio.Event()

        async def on_msg(m):  # message_handler gets ServerNotification models (and transport exceptions)
            if isinstance(m, t.ElicitCompleteNotification):
                got.append(m.params.elicitation_id)
                done.set()

        async def on_other(m):
            if isinstance(m, t.ElicitCompleteNotification):
                other.append(m.params.elicitation_id)

        async def elicit_cb(ctx: ClientRequestContext, p: t.ElicitRequestParams) -> t.ElicitResult:
            assert isinstance(p, t.ElicitRequestURLParams), p
            print("client got elicitation/create:", p.mode, p.url, p.elicitation_id)
            async def pay():  # "user pays" a bit later
                await anyio.sleep(0.5)
                async with httpx.AsyncClient() as h:
                    await h.post(f"{base}/fake-webhook/{p.elicitation_id}", params={"user": "bob"})
            tg.start_soon(pay)
            return t.ElicitResult(action="accept")  # URL mode: accept = user agreed to open the URL, no content

        async with anyio.create_task_group() as tg:
            # (a) -32042 variant; a second alice session must NOT receive the completion
            async with client(f"{base}/mcp", mode="legacy", elicitation_callback=elicit_cb, message_handler=on_msg) as c, \
                       client(f"{base}/mcp", mode="legacy", elicitation_callback=elicit_cb, message_handler=on_other) as c2:
                await c2.list_tools()
                try:
                    await c.call_tool("paid_32042", {})
                except MCPError as e:
                    print("MCPError code:", e.code, type(e).__name__)
                    err = UrlElicitationRequiredError.from_error(e.error)
                    el = err.elicitations[0]
                    print("elicitations[0]:", el.mode, el.url, el.elicitation_id)
                async with httpx.AsyncClient() as h:
                    await h.post(f"{base}/fake-webhook/{el.elicitation_id}", params={"user": "alice"})
                with anyio.fail_after(5):
                    await done.wait()
                print("notifications/elicitation/complete received:", got == [el.elicitation_id], "other session got:", other)
                print("retry:", (await c.call_tool("paid_32042", {})).content[0].text)
            # (b) elicitation/create (url) mid-call, progress while waiting
            async with client(f"{base}/mcp", mode="legacy", elicitation_callback=elicit_cb, token="tok-bob") as c:
                prog: list[float] = []

                async def on_progress(p: float, total: float | None, msg: str | None) -> None:
                    prog.append(p)
                res = await c.call_tool("paid_create", {}, progress_callback=on_progress)
                print("paid_create ->", res.content[0].text, "| progress notifications:", len(prog))
        # (c) form-only client: declare {"elicitation": {"form": {}}} (Client has no public knob; see 03/notes)
        from _formonly import form_only_client
        async with form_only_client(f"{base}/mcp", token="tok-carol") as c:
            res = await c.call_tool("paid_32042", {})
            print("form-only ->", res.is_error, res.content[0].text)


if __name__ == "__main__":
    anyio.run(main)
