"""Free billing tools: what the caller subscribes to, and a way to the Stripe billing portal.

No tool buys or cancels anything: changing a subscription always happens in the user's browser,
on Stripe's portal, behind the service's own sign-in check.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
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
from service.db.engine import SessionFactory
from service.db.metadata import utcnow
from service.mcp_server.caller import current_caller


class SubscriptionStatus(BaseModel):
    plan: str
    plan_name: str
    status: str
    has_access: bool
    renews_or_ends_at: datetime | None
    cancels_at_period_end: bool
    access_revoked_because: str | None


class BillingStatus(BaseModel):
    subscriptions: list[SubscriptionStatus]
    summary: str


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)])


def register_billing_tools(
    server: MCPServer,
    sessions: SessionFactory,
    catalog: PlanCatalog,
    *,
    public_base_url: str,
    grace_seconds: int,
) -> None:
    grace = timedelta(seconds=grace_seconds)

    @server.tool(description="Your subscriptions: plan, status, and when they renew or end.")
    async def billing_status() -> BillingStatus:
        caller = current_caller()
        async with sessions() as session:
            rows = (
                await session.exec(
                    select(Subscription)
                    .where(col(Subscription.user_id) == caller.user_id)
                    .order_by(col(Subscription.created_at))
                )
            ).all()
        now = utcnow()
        items = [
            SubscriptionStatus(
                plan=row.plan_id,
                plan_name=plan.name if (plan := catalog.get(row.plan_id)) else row.plan_id,
                status=row.status,
                has_access=grants_access(row, grace=grace, now=now),
                renews_or_ends_at=row.current_period_end,
                cancels_at_period_end=row.cancel_at_period_end,
                access_revoked_because=row.access_revoked_reason,
            )
            for row in rows
        ]
        active = [item.plan_name for item in items if item.has_access]
        summary = f"Active: {', '.join(active)}." if active else "No active subscription."
        return BillingStatus(subscriptions=items, summary=summary)

    @server.tool(
        description=(
            "Open the Stripe billing portal in your browser to update payment details, cancel or resume. "
            "Nothing changes until you act in the portal."
        )
    )
    async def manage_billing(ctx: Context) -> CallToolResult | InputRequiredResult:
        url = f"{public_base_url}/billing"
        message = "Manage your subscription on Stripe's billing portal (you will be asked to sign in)."
        if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            if ctx.request_state is not None:
                return _text(f"The billing portal is at {url}. Changes show up in billing_status.")
            params = ElicitRequestURLParams(mode="url", message=message, url=url, elicitation_id=_portal_id())
            return InputRequiredResult(
                input_requests={"billing": ElicitRequest(params=params)}, request_state="billing-portal"
            )
        capabilities = ctx.client_capabilities
        if not (capabilities and capabilities.elicitation and capabilities.elicitation.url is not None):
            return _text(f"Open {url} in your browser to manage your subscription.")
        answer = await ctx.elicit_url(message, url, _portal_id())
        if answer.action == "accept":
            return _text("The billing portal is open in your browser. Changes show up in billing_status.")
        return _text("Billing portal not opened; nothing changed.")


def _portal_id() -> str:
    return f"portal_{secrets.token_urlsafe(16)}"
