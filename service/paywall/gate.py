"""The gate in front of every paid tool: entitled callers pass, everyone else gets a URL elicitation.

How the elicitation reaches the user depends on the protocol era and what the client declared:
- 2026-07-28: an `InputRequiredResult` with a URL `ElicitRequest` and a sealed `request_state`;
  the retry waits (bounded) for the payment, then runs the tool or asks again.
- 2025-11-25 with `url` support: JSON-RPC error -32042 (default), or `elicitation/create` in URL
  mode followed by a bounded wait, per tool or service-wide.
- 2025-11-25 without `url` support: never a URL-mode request, but a tool error with the link.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
    InputResponse,
    TextContent,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from service.billing.plans import Plan
from service.billing.usage import PaidCall
from service.billing.usage_postgres import PostgresDecisions
from service.db.engine import SessionFactory
from service.db.unavailable import DATABASE_UNAVAILABLE, unavailable_cause
from service.db.wal import WalCheckpoints
from service.mcp_server.caller import Caller, CallerSource
from service.mcp_server.elicit import ElicitAction, ask_to_open, invalid_answer_text
from service.mcp_server.output_cap import when_refused
from service.observability import request_context
from service.observability.metrics import ServiceMetrics
from service.paywall.admission import (
    IDEMPOTENCY_KEY_META,
    Admission,
    InvalidIdempotencyKey,
    Verdict,
    call_key,
    idempotency_key,
)
from service.paywall.bus import PaymentWaiters, wait_for
from service.paywall.elicitations import ElicitationRequest, RateLimited, open_or_reuse
from service.paywall.entitlements import Entitlements
from service.paywall.known_links import KnownLinks
from service.paywall.models import Elicitation
from service.paywall.notifier import SessionNotifier
from service.paywall.tool_index import PaidToolIndex
from service.paywall.toolset import ElicitationStyle, PaidTool

INPUT_REQUEST_KEY = "payment"
# How the client answered a payment link: the elicitation result's `action`.
Admitted = Callable[[], Awaitable[bool]]  # whether the call may run now (spending what pays for it)
PROGRESS_INTERVAL_SECONDS = 5.0
RELEASE_SECONDS = 10.0  # the most a failed call waits to give back what paid for it


@dataclass(frozen=True)
class PaidFor:
    """A call the caller may run; `usage_id`: what its decision recorded, None when nothing was."""

    user_id: str
    usage_id: str | None


@dataclass(frozen=True)
class GateSettings:
    public_base_url: str
    elicitation_style: ElicitationStyle
    elicitation_ttl: timedelta
    payment_wait_seconds: float
    retry_wait_seconds: float
    max_elicitations_per_hour: int
    max_sessions_owed: int


logger = logging.getLogger(__name__)


def error_result(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


class Paywall:
    def __init__(
        self,
        settings: GateSettings,
        sessions: SessionFactory,
        entitlements: Entitlements,
        waiters: PaymentWaiters,
        notifier: SessionNotifier,
        tools: PaidToolIndex,
        known_links: KnownLinks,
        metrics: ServiceMetrics | None = None,
        *,
        callers: CallerSource,
        wal: WalCheckpoints | None = None,
        postgres_decisions: PostgresDecisions | None = None,
    ) -> None:
        self._settings = settings
        self._sessions = sessions
        self._entitlements = entitlements
        self._waiters = waiters
        self._notifier = notifier
        self._tools = tools
        self._known_links = known_links
        self._metrics = metrics
        self._callers = callers
        self._admission = Admission(
            sessions, tools.catalog, entitlements, wal=wal, postgres=postgres_decisions
        )

    def close(self) -> None:
        self._admission.close()

    def satisfied_by(self, elicitation: Elicitation, entitled_plan_ids: frozenset[str]) -> bool:
        """Whether these plans unlock the tool `elicitation` was opened for."""
        return self._tools.satisfied_by(elicitation, entitled_plan_ids)

    def plans_for(self, tool_name: str) -> list[Plan]:
        """Every plan that unlocks the tool, in the order they are offered."""
        return self._tools.plans_for(tool_name)

    def payment_url(self, elicitation_id: str) -> str:
        return f"{self._settings.public_base_url}/pay/{elicitation_id}"

    async def run(
        self, ctx: Context, tool: PaidTool, arguments: dict[str, Any], body: Callable[[], Awaitable[Any]]
    ) -> Any:
        """`body`'s answer when the caller may run the tool, else what tells them how to pay. A call
        that raises, is cancelled, answers an error or a result the output cap refuses gives back
        what paid for it."""
        decided = await self._guarded(ctx, tool, arguments)
        if not isinstance(decided, PaidFor):
            return decided
        try:
            answer = await body()
        except BaseException:
            await self._release(decided, tool.name)
            raise
        if isinstance(answer, CallToolResult) and answer.is_error:
            await self._release(decided, tool.name)
        elif decided.usage_id is not None:
            # The result as sent is measured after this: a result the cap refuses is given back.
            when_refused(lambda: self._release(decided, tool.name))
        return answer

    async def _release(self, paid: PaidFor, tool: str) -> None:
        """Give back what paid for a call that did not complete, whatever cancels the task meanwhile:
        bounded in time, and logged rather than raised (the call's own outcome stands)."""
        if paid.usage_id is None:
            return  # an unlimited plan's call: nothing was spent
        with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_SECONDS):
            try:
                await self._admission.release(paid.user_id, paid.usage_id)
                return
            except Exception:
                logger.warning("could not give back what paid for a failed %s call", tool, exc_info=True)
                return
        logger.warning("giving back what paid for a failed %s call took over %ss", tool, RELEASE_SECONDS)

    async def _admit(self, call: PaidCall, plan_ids: frozenset[str], *, fresh: bool = False) -> Verdict:
        """The decision on `call`, taken to its end even when the call is cancelled meanwhile (a
        decision queued for a batch commits anyway): then what it spent is given back."""
        with anyio.CancelScope(shield=True):
            verdict = await self._admission.admit(call, plan_ids, fresh=fresh)
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            if verdict.usage_id is not None:
                await self._release(PaidFor(call.user_id, verdict.usage_id), call.tool)
            raise
        return verdict

    async def _guarded(
        self, ctx: Context, tool: PaidTool, arguments: dict[str, Any]
    ) -> CallToolResult | InputRequiredResult | PaidFor:
        """`PaidFor` when the caller may run the tool; the time this takes is not the tool's own."""
        started = time.perf_counter()
        try:
            return await self._guard(ctx, tool, arguments)
        except DATABASE_UNAVAILABLE as exc:
            # Not decided, so not run; worth retrying, and said so: a crash would tell the caller nothing.
            logger.warning(
                "paid call to %s not decided: database unavailable (%s)", tool.name, unavailable_cause(exc)
            )
            return error_result(
                f"{tool.name} did not run: the database is unavailable, so its payment could not be "
                "checked. Try again in a few seconds."
            )
        finally:
            request_context.spent_in_paywall(time.perf_counter() - started)

    async def _guard(
        self, ctx: Context, tool: PaidTool, arguments: dict[str, Any]
    ) -> CallToolResult | InputRequiredResult | PaidFor:
        caller = self._callers()
        plan_ids = self._tools.unlocking_plan_ids(tool)
        if not plan_ids:
            return error_result(f"{tool.name} is not offered in any plan right now.")
        if await self._admission.unlimited(caller.user_id, plan_ids):
            return PaidFor(caller.user_id, None)
        try:
            named = idempotency_key(ctx.request_context.meta)
        except InvalidIdempotencyKey as exc:
            return error_result(f"{tool.name} did not run: {exc}.")
        call = PaidCall(
            user_id=caller.user_id,
            tool=tool.name,
            call_key=call_key(
                session_id=(ctx.headers or {}).get("mcp-session-id"),
                request_id=str(ctx.request_id),
                tool=tool.name,
                arguments=arguments,
                idempotency_key=named,
            ),
        )
        verdict = await self._admit(call, plan_ids)
        if verdict.retried:
            # Paid once, it runs once: a free repeat could also outlive the payment it rode on,
            # which a failure of the first run gives back.
            return error_result(
                f"{tool.name} did not run again: this call (the same {IDEMPOTENCY_KEY_META!r}, or the "
                f"same request in this session) was made before and paid once. To call {tool.name} "
                "again, send a new request."
            )
        if verdict.allowed:
            return PaidFor(caller.user_id, verdict.usage_id)
        paid = PaidFor(caller.user_id, None)

        async def admitted() -> bool:
            nonlocal paid
            later = await self._admit(call, plan_ids, fresh=True)
            if later.allowed and not later.retried:
                paid = PaidFor(caller.user_id, later.usage_id)
                return True
            return False

        unlocking = self._tools.unlocking_plans(tool)
        # Past a plan's included calls, offer the plans the user does not have (and credits).
        plans = [plan for plan in unlocking if plan.id not in verdict.exhausted_plan_ids] or unlocking
        refusal: CallToolResult | InputRequiredResult | None
        if ctx.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            refusal = await self._legacy(ctx, caller, tool, plans, admitted)
        else:
            refusal = await self._modern(ctx, caller, tool, plans, admitted)
        return paid if refusal is None else refusal

    # -- 2026-07-28 --------------------------------------------------------------------------

    async def _modern(
        self, ctx: Context, caller: Caller, tool: PaidTool, plans: list[Plan], admitted: Admitted
    ) -> CallToolResult | InputRequiredResult | None:
        # A retry carries the sealed state, which proves it is this user's retry of this very call.
        retry_wait = self._settings.retry_wait_seconds
        if ctx.request_state is not None:
            refused = _refusal(tool, _answered((ctx.input_responses or {}).get(INPUT_REQUEST_KEY)))
            if refused is not None:
                return refused
            if await self._wait_for_payment(ctx, caller.user_id, admitted, retry_wait):
                return None
        try:
            elicitation_id = await self._open(
                caller, tool, plans[0], ctx.protocol_version or "", mcp_session_id=None
            )
        except RateLimited as exc:
            return error_result(_rate_limited_text(exc))
        if ctx.client_capabilities is not None and not _supports_url(ctx):
            # A client that declared what it handles, and not URL elicitation, is given the link.
            return error_result(
                f"{self._message(tool, plans[0])} Open {self.payment_url(elicitation_id)} in your "
                f"browser to subscribe, then call {tool.name} again."
            )
        return InputRequiredResult(
            input_requests={
                INPUT_REQUEST_KEY: ElicitRequest(
                    params=ElicitRequestURLParams(
                        mode="url",
                        message=self._message(tool, plans[0]),
                        url=self.payment_url(elicitation_id),
                        elicitation_id=elicitation_id,
                    )
                )
            },
            request_state=elicitation_id,
        )

    # -- 2025-11-25 --------------------------------------------------------------------------

    async def _legacy(
        self, ctx: Context, caller: Caller, tool: PaidTool, plans: list[Plan], admitted: Admitted
    ) -> CallToolResult | None:
        plan = plans[0]
        supports_url = _supports_url(ctx)
        session_id = (ctx.headers or {}).get("mcp-session-id") if supports_url else None
        try:
            elicitation_id = await self._open(
                caller, tool, plan, ctx.protocol_version or "", mcp_session_id=session_id
            )
        except RateLimited as exc:
            return error_result(_rate_limited_text(exc))
        url = self.payment_url(elicitation_id)
        if not supports_url:
            return error_result(
                f"{self._message(tool, plan)} Open {url} in your browser to subscribe, "
                f"then call {tool.name} again."
            )
        if session_id is not None:
            self._notifier.hold(session_id, ctx.session)
        params = ElicitRequestURLParams(
            mode="url", message=self._message(tool, plan), url=url, elicitation_id=elicitation_id
        )
        if (tool.elicitation or self._settings.elicitation_style) == "error":
            raise UrlElicitationRequiredError([params])

        not_confirmed = error_result(
            f"Your payment has not been confirmed yet. Once it is, call {tool.name} again: {url}"
        )
        # The client's answer and the payment share one wait and one of the user's waiting places:
        # a client that never answers holds neither the call nor a place for longer than a payer.
        with self._waiters.place(caller.user_id) as placed:
            if not placed:
                logger.info("payment wait refused: the caller has as many waiting as allowed")
                return not_confirmed
            bound = self._settings.payment_wait_seconds
            started = anyio.current_time()
            with anyio.move_on_after(bound) as answer_wait:
                action = await ask_to_open(ctx, params.message, url, elicitation_id)
            if answer_wait.cancelled_caught:
                logger.info("elicitation %s not answered within the payment wait", elicitation_id)
                return not_confirmed
            if action is None:
                return error_result(
                    f"{invalid_answer_text(url)} {tool.name} did not run; call it again any time."
                )
            refused = _refusal(tool, action)
            if refused is not None:
                return refused
            remaining = bound - (anyio.current_time() - started)
            if await self._wait_placed(ctx, caller.user_id, admitted, remaining):
                return None
        return not_confirmed

    # -- shared ------------------------------------------------------------------------------

    async def _open(
        self, caller: Caller, tool: PaidTool, plan: Plan, era: str, *, mcp_session_id: str | None
    ) -> str:
        """The id of the caller's open elicitation for `plan`, made if there is none."""
        known = self._known_links.get(caller.user_id, plan.id, mcp_session_id)
        if known is not None:
            request_context.bind(user_id=caller.user_id, elicitation_id=known)
            return known
        request = ElicitationRequest(
            user_id=caller.user_id,
            plan_id=plan.id,
            tool_name=tool.name,
            protocol_era=era,
            mcp_session_id=mcp_session_id,
            ttl=self._settings.elicitation_ttl,
            max_new_per_hour=self._settings.max_elicitations_per_hour,
            max_sessions_owed=self._settings.max_sessions_owed,
        )
        async with self._sessions() as session, session.begin():
            elicitation, _ = await open_or_reuse(session, request, self._metrics)
        self._known_links.remember(
            caller.user_id, plan.id, elicitation.id, elicitation.expires_at, mcp_session_id
        )
        request_context.bind(user_id=caller.user_id, elicitation_id=elicitation.id)
        return elicitation.id

    async def _wait_for_payment(self, ctx: Context, user_id: str, admitted: Admitted, bound: float) -> bool:
        """Wait up to `bound` seconds for a plan or credits, reporting progress; True once the call
        may run (a credit, if that is what pays for it, is spent by then)."""
        with self._waiters.place(user_id) as placed:
            if not placed:
                # As many of this user's calls wait already: answer at once, as if nothing was paid.
                logger.info("payment wait refused: the caller has as many waiting as allowed")
                return False
            return await self._wait_placed(ctx, user_id, admitted, bound)

    async def _wait_placed(self, ctx: Context, user_id: str, admitted: Admitted, bound: float) -> bool:
        """`_wait_for_payment` for a caller that holds one of the user's waiting places."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            with self._waiters.watch(user_id) as changed:
                if await admitted():
                    return True
                elapsed = loop.time() - started
                if elapsed >= bound:
                    return False
                await ctx.report_progress(elapsed, bound, "Waiting for Stripe to confirm the payment")
                await wait_for(changed, min(bound - elapsed, PROGRESS_INTERVAL_SECONDS))

    def _message(self, tool: PaidTool, plan: Plan) -> str:
        packs = self._tools.catalog.credit_packs()
        credits = f", or buy {packs[0].name} for {packs[0].price_label}" if packs else ""
        return (
            f"{tool.name} needs the {plan.name} plan ({plan.price_label}){credits}. Pay securely with Stripe."
        )


def _answered(answer: InputResponse | None) -> ElicitAction | None:
    """The action a 2026-07-28 retry reports for the payment link, if it answers it."""
    return answer.action if isinstance(answer, ElicitResult) else None


def _supports_url(ctx: Context) -> bool:
    """Whether the client declared URL-mode elicitation."""
    capabilities = ctx.client_capabilities
    return bool(capabilities and capabilities.elicitation and capabilities.elicitation.url is not None)


def _refusal(tool: PaidTool, action: ElicitAction | None) -> CallToolResult | None:
    """The tool result for a declined or cancelled payment link; None for anything else."""
    if action == "decline":
        return error_result(f"You declined to subscribe; {tool.name} did not run. Call it again any time.")
    if action == "cancel":
        return error_result(f"Subscription cancelled; {tool.name} did not run. Call it again any time.")
    return None


def _rate_limited_text(exc: RateLimited) -> str:
    minutes = max(1, exc.retry_after_seconds // 60)
    return f"Too many payment links requested; try again in about {minutes} minutes."
