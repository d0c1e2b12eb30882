"""Whether a paid call may run, and recording how it is paid, in one transaction.

An unlimited plan lets the call through from the entitlement cache, without a database round trip.
A plan with included calls counts the call (or meters it past them, for overage `meter`); a call
no plan covers, or past a `block` quota, spends one of the user's credits. Whatever funds the call
is recorded in the transaction that decides it, once per call key (`call_key`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.billing.plans import PlanCatalog
from service.billing.usage import PaidCall, Refused, entitling_subscription, record_plan_call, spend_credit
from service.db.engine import SessionFactory
from service.paywall.entitlements import Entitlements

# Two tool calls with the same session, request id, tool and arguments within this window are one
# call retried: a stateless client that starts its request ids afresh on every connection would
# otherwise be charged again for a retry. Beyond it, the same request is a new call.
RETRY_WINDOW_SECONDS = 600


def call_key(
    *,
    session_id: str | None,
    request_id: str,
    tool: str,
    arguments: Mapping[str, Any],
    now: float | None = None,
) -> str:
    """The call's identity across retries and replicas: what the client sent, not where it landed."""
    window = int((time.time() if now is None else now) // RETRY_WINDOW_SECONDS)
    material = json.dumps(
        [session_id or "", request_id, tool, arguments, window],
        sort_keys=True,
        default=str,
        separators=(",", ":"),
    )
    return hashlib.sha256(material.encode()).hexdigest()


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    # Plans the user has for this tool whose included calls are used up this period.
    exhausted_plan_ids: frozenset[str] = frozenset()


ALLOWED = Verdict(allowed=True)


class Admission:
    def __init__(self, sessions: SessionFactory, catalog: PlanCatalog, entitlements: Entitlements) -> None:
        self._sessions = sessions
        self._catalog = catalog
        self._entitlements = entitlements

    async def admit(self, call: PaidCall, plan_ids: frozenset[str], *, fresh: bool = False) -> Verdict:
        entitled = await self._entitlements.plans_of(call.user_id, fresh=fresh) & plan_ids
        counted = []
        for plan_id in entitled:
            plan = self._catalog.get(plan_id)
            if plan is None or not plan.counts_calls:
                return ALLOWED
            counted.append(plan_id)
        if not counted and not fresh and self._entitlements.known_without_credits(call.user_id):
            return Verdict(allowed=False)
        if counted and await self._plan_call(call, counted):
            return ALLOWED
        try:
            async with self._sessions() as session, session.begin():
                await spend_credit(session, call)
            return ALLOWED
        except Refused:
            pass  # rolled back
        self._entitlements.saw_without_credits(call.user_id)
        return Verdict(allowed=False, exhausted_plan_ids=frozenset(counted))

    async def _plan_call(self, call: PaidCall, plan_ids: list[str]) -> bool:
        """Count (or meter) the call under the user's subscription to one of `plan_ids`."""
        try:
            async with self._sessions() as session, session.begin():
                subscription = await entitling_subscription(
                    session, call.user_id, plan_ids, grace=self._entitlements.grace
                )
                plan = self._catalog.get(subscription.plan_id) if subscription is not None else None
                if subscription is None or plan is None:
                    return False  # the cache was behind: no longer subscribed
                await record_plan_call(
                    session, call, subscription, plan, self._catalog.metered_price(call.tool)
                )
                return True
        except Refused:
            return False  # rolled back: past a quota that blocks
