"""Free billing tools: what the caller subscribes to, and a way to the Stripe billing portal.

No tool buys or cancels anything: changing a subscription always happens in the user's browser,
on Stripe's portal, behind the service's own sign-in check.
"""

from __future__ import annotations

import logging
import secrets
from datetime import datetime, timedelta

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestURLParams,
    InputRequiredResult,
    TextContent,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel
from sqlmodel import col, select

from service.billing.models import Subscription
from service.billing.plans import PlanCatalog
from service.billing.subscriptions import grants_access
from service.billing.usage import credit_balance, period_usage
from service.db.engine import SessionFactory
from service.db.metadata import utcnow
from service.db.unavailable import DATABASE_UNAVAILABLE, unavailable_cause
from service.mcp_server.caller import CallerSource
from service.mcp_server.elicit import ask_to_open, invalid_answer_text
from service.money import format_amount

logger = logging.getLogger(__name__)


class SubscriptionStatus(BaseModel):
    plan: str
    plan_name: str
    status: str
    has_access: bool
    renews_or_ends_at: datetime | None
    cancels_at_period_end: bool
    access_revoked_because: str | None
    # This billing period: calls counted against the plan's included calls (None: unlimited plan).
    calls_used: int | None = None
    calls_included: int | None = None
    # Calls billed per call this period (pay as you go, or metered overage) and their charges so far,
    # in minor units of `currency`; invoiced at the period's end.
    metered_calls: int = 0
    metered_charges: int = 0
    metered_charges_label: str | None = None
    currency: str | None = None


class BillingStatus(BaseModel):
    subscriptions: list[SubscriptionStatus]
    # Prepaid calls left: one pays one call of any paid tool.
    credits: int = 0
    summary: str


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)])


def register_billing_tools(
    server: MCPServer,
    sessions: SessionFactory,
    catalog: PlanCatalog,
    *,
    callers: CallerSource,
    public_base_url: str,
    grace_seconds: int,
) -> None:
    grace = timedelta(seconds=grace_seconds)

    @server.tool(
        description=(
            "Your subscriptions (plan, status, when they renew or end), calls used and included this "
            "period, metered charges so far, and your prepaid credit balance."
        )
    )
    async def billing_status() -> BillingStatus:
        try:
            return await _billing_status()
        except DATABASE_UNAVAILABLE as exc:
            logger.warning("billing_status not answered: database unavailable (%s)", unavailable_cause(exc))
            raise ToolError(
                "billing_status is not available right now: the database is unavailable. "
                "Try again in a few seconds."
            ) from exc

    async def _billing_status() -> BillingStatus:
        caller = callers()
        now = utcnow()
        items: list[SubscriptionStatus] = []
        async with sessions() as session:
            rows = (
                await session.exec(
                    select(Subscription)
                    .where(col(Subscription.user_id) == caller.user_id)
                    .order_by(col(Subscription.created_at))
                )
            ).all()
            for row in rows:
                plan = catalog.get(row.plan_id)
                item = SubscriptionStatus(
                    plan=row.plan_id,
                    plan_name=plan.name if plan else row.plan_id,
                    status=row.status,
                    has_access=grants_access(row, grace=grace, now=now),
                    renews_or_ends_at=row.current_period_end,
                    cancels_at_period_end=row.cancel_at_period_end,
                    access_revoked_because=row.access_revoked_reason,
                )
                if plan is not None and plan.counts_calls:
                    usage = await period_usage(session, row)
                    item.calls_used = usage.included_used
                    item.calls_included = plan.included_calls
                    item.metered_calls = usage.metered_calls
                    item.metered_charges = usage.metered_amount
                    item.currency = plan.currency
                    if plan.meters_overage:
                        item.metered_charges_label = format_amount(usage.metered_amount, plan.currency)
                items.append(item)
            credits = await credit_balance(session, caller.user_id)
        return BillingStatus(subscriptions=items, credits=credits, summary=_summary(items, credits))

    @server.tool(
        description=(
            "Open the Stripe billing portal in your browser to update payment details, cancel or resume. "
            "Nothing changes until you act in the portal."
        )
    )
    async def manage_billing(ctx: Context) -> CallToolResult | InputRequiredResult:
        url = f"{public_base_url}/billing"
        message = "Manage your subscription on Stripe's billing portal (you will be asked to sign in)."
        capabilities = ctx.client_capabilities
        elicitation = capabilities.elicitation if capabilities else None
        supports_url = bool(elicitation and elicitation.url is not None)
        if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS and (capabilities is None or supports_url):
            if ctx.request_state is not None:
                return _text(f"The billing portal is at {url}. Changes show up in billing_status.")
            params = ElicitRequestURLParams(mode="url", message=message, url=url, elicitation_id=_portal_id())
            return InputRequiredResult(
                input_requests={"billing": ElicitRequest(params=params)}, request_state="billing-portal"
            )
        if not supports_url:
            return _text(f"Open {url} in your browser to manage your subscription.")
        action = await ask_to_open(ctx, message, url, _portal_id())
        if action is None:
            refused = _text(f"{invalid_answer_text(url)} Nothing changed; open it in your browser.")
            return refused.model_copy(update={"is_error": True})
        if action == "accept":
            return _text("The billing portal is open in your browser. Changes show up in billing_status.")
        return _text("Billing portal not opened; nothing changed.")


def _summary(items: list[SubscriptionStatus], credits: int) -> str:
    parts: list[str] = []
    for item in items:
        if not item.has_access:
            continue
        text = item.plan_name
        if item.calls_included:
            text += f" ({item.calls_used or 0:,} of {item.calls_included:,} included calls used this period)"
        if item.metered_charges_label is not None:
            text += f" ({item.metered_calls:,} calls billed per call so far: {item.metered_charges_label})"
        parts.append(text)
    summary = f"Active: {'; '.join(parts)}." if parts else "No active subscription."
    return f"{summary} Credits: {credits:,}." if credits else summary


def _portal_id() -> str:
    return f"portal_{secrets.token_urlsafe(16)}"
