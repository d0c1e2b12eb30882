# Proves Q5+Q6 on 2026-07-28: tool returns InputRequiredResult (URL ElicitRequest + request_state); retry sees unsealed
# state + input_responses; Client.call_tool auto-loop vs manual loop; RequestStateSecurity shared keys across 2 "replicas";
# principal binding; progress while blocking. Run: .venv/bin/python docs/dev/spikes/03_modern_input_required.py
from __future__ import annotations

import contextlib

import anyio
import mcp_types as t
from _harness import StaticTokenVerifier, auth_settings, client, serve
from mcp import InputRequiredRoundsExceededError, MCPError
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity

PAID: set[str] = set()
KEYS = ["k" * 32]  # >= 32 bytes each; keys[0] seals, all unseal (rotation ring)
SEEN: list[tuple[str | None, object]] = []


def make_replica(keys: list[str]) -> MCPServer:
    # same name on every replica (it is the default audience) or pass RequestStateSecurity(audience=...)
    mcp = MCPServer("paid-mcp", token_verifier=StaticTokenVerifier(), auth=auth_settings(), log_level="WARNING",
                    request_state_security=RequestStateSecurity(keys=keys, ttl=600))

    @mcp.tool()
    async def premium(q: str, ctx: Context) -> t.CallToolResult | t.InputRequiredResult:
        user = get_access_token().subject  # type: ignore[union-attr]
        if ctx.request_state is not None:  # retry: plaintext we minted (SDK verified + unsealed it)
            SEEN.append((ctx.request_state, ctx.input_responses))
            with anyio.move_on_after(1.0):  # bounded block "until the request is fulfilled"
                i = 0
                while user not in PAID:
                    i += 1
                    await ctx.report_progress(i, None, "waiting for payment")
                    await anyio.sleep(0.2)
        if user in PAID:
            return t.CallToolResult(content=[t.TextContent(type="text", text=f"premium {q} for {user}")])
        eid = "el-123"  # our elicitation record id (no elicitationId field exists at 2026-07-28)
        return t.InputRequiredResult(
            input_requests={"pay": t.ElicitRequest(params=t.ElicitRequestURLParams(
                message="Subscribe to Pro (9.00 EUR/month)", url=f"http://pay.example/pay/{eid}"))},
            request_state=eid,  # plaintext here; the SDK seals it on the way out
        )
    return mcp


@contextlib.asynccontextmanager
async def run(mcp: MCPServer):
    from starlette.applications import Starlette

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with mcp.session_manager.run():
            yield
    app = Starlette(lifespan=lifespan)
    app.mount("/", mcp.streamable_http_app())
    async with serve(app) as base:
        yield f"{base}/mcp"


async def main() -> None:
    calls: list[str] = []

    async def elicit_cb(ctx, p: t.ElicitRequestParams) -> t.ElicitResult:
        assert isinstance(p, t.ElicitRequestURLParams)
        calls.append(p.url)
        return t.ElicitResult(action="accept")

    async with run(make_replica(KEYS)) as url_a, run(make_replica(KEYS)) as url_b, run(make_replica(["z" * 32])) as url_c:
        # 1. manual loop (what a test uses): allow_input_required=True returns the InputRequiredResult
        async with client(url_a, elicitation_callback=elicit_cb) as c:
            print("negotiated:", c.protocol_version)
            r = await c.session.call_tool("premium", {"q": "x"}, allow_input_required=True)
            assert isinstance(r, t.InputRequiredResult)
            req = r.input_requests["pay"]
            print("InputRequiredResult:", req.method, req.params.model_dump(exclude_none=True), "state:", r.request_state[:12] + "...")
            state = r.request_state
        # 2. retry on ANOTHER replica sharing keys + name: accepted, handler sees plaintext + responses
        async with client(url_b, elicitation_callback=elicit_cb) as c:
            r2 = await c.session.call_tool("premium", {"q": "x"}, allow_input_required=True,
                                           input_responses={"pay": t.ElicitResult(action="accept")}, request_state=state)
            print("replica B retry ->", type(r2).__name__, "| handler saw:", SEEN[-1])
        # 3. different keys -> rejected; other user -> rejected (principal binding); other args -> rejected
        for label, u, tok, args in (("other keys", url_c, "tok-alice", {"q": "x"}), ("bob", url_b, "tok-bob", {"q": "x"}),
                                    ("other args", url_b, "tok-alice", {"q": "y"})):
            async with client(u, token=tok) as c:
                try:
                    await c.session.call_tool("premium", args, allow_input_required=True, request_state=state)
                except MCPError as e:
                    print(f"{label}: MCPError {e.code} {e.message} {e.data}")
        # 4. Client.call_tool auto-loop: calls elicitation_callback every round, gives up after max rounds
        async with client(url_a, elicitation_callback=elicit_cb, input_required_max_rounds=2) as c:
            try:
                await c.call_tool("premium", {"q": "x"})
            except InputRequiredRoundsExceededError as e:
                print("auto loop gave up:", type(e).__name__, "callback calls:", len(calls))
        # 5. auto loop completes once the payment lands mid-wait; progress arrives over the POST's SSE response
        async with client(url_a, elicitation_callback=elicit_cb) as c, anyio.create_task_group() as tg:
            async def pay():
                await anyio.sleep(1.5)
                PAID.add("alice")
            tg.start_soon(pay)
            prog: list[float] = []

            async def on_progress(p, total, msg):
                prog.append(p)
            res = await c.call_tool("premium", {"q": "x"}, progress_callback=on_progress)
            print("auto loop result:", res.content[0].text, "| progress notifications:", len(prog))


anyio.run(main)
