"""Rows a test needs, written through the service's own storage functions, without an MCP call.

A subscription made here exists only in the service's database (the sandbox never billed it), so
use these for what reads our rows (the paywall, pages, billing_status); tests of the Stripe round
trip subscribe through Checkout (tests/support/subscriptions.py).
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from service.billing.events import EntitlementChanged
from service.billing.models import Subscription
from service.billing.subscriptions import apply_subscription, bind_customer
from service.billing.usage import grant_credits
from service.db.metadata import utcnow
from service.identity.models import User
from service.paywall.elicitations import ElicitationRequest, open_or_reuse
from service.paywall.models import Elicitation
from tests.support.service import RunningService

HANDSHAKE_ERA = "2025-11-25"
MONTH = timedelta(days=30)


async def _changed(service: RunningService, user_id: str) -> None:
    """Tell the service's listeners, as the webhook applier does after committing a change."""
    await service.runtime.bus.publish(EntitlementChanged(user_id))


async def elicitation(
    service: RunningService,
    user: User,
    *,
    tool: str = "ascii_chart",
    plan_id: str | None = None,
    era: str = HANDSHAKE_ERA,
    mcp_session_id: str | None = None,
) -> Elicitation:
    """The user's open elicitation for `plan_id` (by default the first plan the paywall offers for
    `tool`), made if there is none, as an unpaid call of `tool` opens it."""
    settings = service.settings
    request = ElicitationRequest(
        user_id=user.id,
        plan_id=plan_id or service.runtime.paywall.plans_for(tool)[0].id,
        tool_name=tool,
        protocol_era=era,
        mcp_session_id=mcp_session_id,
        ttl=timedelta(seconds=settings.paywall.elicitation_ttl_seconds),
        max_new_per_hour=settings.paywall.max_elicitations_per_hour,
    )
    async with service.runtime.sessions() as session, session.begin():
        row, _ = await open_or_reuse(session, request)
    return row


def payment_url(service: RunningService, row: Elicitation) -> str:
    return service.runtime.paywall.payment_url(row.id)


async def payment_link(service: RunningService, user: User, **kwargs: Any) -> str:
    """The URL of the user's payment page, as an unpaid call hands it out (kwargs: `elicitation`)."""
    return payment_url(service, await elicitation(service, user, **kwargs))


async def subscription(
    service: RunningService,
    user: User,
    *,
    plan_id: str = "pro",
    status: str = "active",
    period: timedelta = MONTH,
) -> Subscription:
    """A subscription row for `user`, stored as if Stripe had reported it (no Stripe object exists)."""
    plan = service.runtime.catalog.get(plan_id)
    assert plan is not None, f"no plan {plan_id!r} in the catalog"
    customer_id = f"cus_factory_{secrets.token_hex(8)}"
    stripe_object = {
        "id": f"sub_factory_{secrets.token_hex(8)}",
        "customer": customer_id,
        "status": status,
        "cancel_at_period_end": False,
        "metadata": {"user_id": user.id},
        "items": {
            "data": [
                {
                    "price": {"lookup_key": plan.lookup_key},
                    "current_period_end": int((utcnow() + period).timestamp()),
                }
            ]
        },
    }
    async with service.runtime.sessions() as session, session.begin():
        bind_customer(session, user.id, customer_id)
        change = await apply_subscription(
            session, stripe_object, observed_at=int(utcnow().timestamp()), catalog=service.runtime.catalog
        )
    await _changed(service, user.id)
    [row] = await service.rows(Subscription, id=change.subscription_id)
    return row


async def credits(service: RunningService, user: User, *, pack_id: str | None = None) -> int:
    """Grant one credit pack (the cheapest unless named), as a paid Checkout does; the credits added."""
    catalog = service.runtime.catalog
    pack = catalog.credit_pack(pack_id) if pack_id else catalog.credit_packs()[0]
    assert pack is not None, f"no credit pack {pack_id!r} in the catalog"
    async with service.runtime.sessions() as session, session.begin():
        granted = await grant_credits(
            session, user.id, pack, source=f"cs_factory_{secrets.token_hex(8)}", payment_intent_id=None
        )
    assert granted
    await _changed(service, user.id)
    return pack.credits
