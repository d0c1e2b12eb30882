"""The paywall's elicitations as the payment requests billing's Stripe sync settles (its port)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from service.billing.stripe_sync.payment_requests import OpenRequests, PaymentRequests
from service.paywall.elicitations import complete, named_and_open, open_elicitations
from service.paywall.models import Elicitation, ElicitationStatus
from service.paywall.tool_index import PaidToolIndex


class ElicitationRequests(PaymentRequests[Elicitation]):
    """The port over the elicitation table; `tools` says which plans unlock an elicitation's tool."""

    def __init__(self, tools: PaidToolIndex) -> None:
        self._tools = tools

    async def named_and_open(
        self, session: AsyncSession, request_id: str, user_id: str
    ) -> tuple[Elicitation | None, OpenRequests[Elicitation]]:
        return await named_and_open(session, request_id, user_id)

    async def open_requests(
        self, session: AsyncSession, user_id: str, known_open: OpenRequests[Elicitation] | None = None
    ) -> list[Elicitation]:
        return await open_elicitations(session, user_id, known_open)

    async def get(self, session: AsyncSession, request_id: str) -> Elicitation | None:
        return await session.get(Elicitation, request_id)

    async def by_ids(self, session: AsyncSession, request_ids: Collection[str]) -> dict[str, Elicitation]:
        rows = await session.exec(select(Elicitation).where(col(Elicitation.id).in_(request_ids)))
        return {row.id: row for row in rows.all()}

    async def complete(self, session: AsyncSession, requests: Sequence[Elicitation]) -> None:
        await complete(session, requests)

    async def expire(self, session: AsyncSession, request: Elicitation) -> None:
        request.status = ElicitationStatus.EXPIRED.value
        session.add(request)

    def satisfied_by(self, request: Elicitation, entitled_plan_ids: frozenset[str]) -> bool:
        return self._tools.satisfied_by(request, entitled_plan_ids)
