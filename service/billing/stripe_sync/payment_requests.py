"""What the Stripe sync needs of the requests to pay that a checkout settles (the paywall's elicitations).

Billing defines this port and the paywall implements it (service/paywall/payment_requests.py), so
billing imports nothing of the paywall. Its steps run inside the caller's transaction: completing
the requests a payment settles commits or rolls back together with the payment itself.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from sqlmodel.ext.asyncio.session import AsyncSession


class PaymentRequest(Protocol):
    """One request to pay for a plan, as the Stripe sync reads it (an elicitation's row)."""

    @property
    def id(self) -> str: ...

    @property
    def user_id(self) -> str: ...

    @property
    def plan_id(self) -> str: ...

    @property
    def protocol_era(self) -> str: ...

    @property
    def mcp_session_id(self) -> str | None: ...

    @property
    def checkout_session_id(self) -> str | None: ...

    @property
    def is_open(self) -> bool: ...


Request = TypeVar("Request", bound=PaymentRequest)


@dataclass(frozen=True)
class OpenRequests(Generic[Request]):
    """A user's open requests, read earlier in the same transaction."""

    user_id: str
    items: list[Request]


class PaymentRequests(Protocol[Request]):
    """Reads and settles requests in the caller's transaction; the caller commits."""

    async def named_and_open(
        self, session: AsyncSession, request_id: str, user_id: str
    ) -> tuple[Request | None, OpenRequests[Request]]:
        """The request `request_id` (whoever's it is) and the user's open ones, in one read."""
        ...

    async def open_requests(
        self, session: AsyncSession, user_id: str, known_open: OpenRequests[Request] | None = None
    ) -> list[Request]:
        """The user's open requests: as this transaction already read them (`known_open`), or now."""
        ...

    async def get(self, session: AsyncSession, request_id: str) -> Request | None: ...

    async def by_ids(self, session: AsyncSession, request_ids: Collection[str]) -> dict[str, Request]: ...

    async def complete(self, session: AsyncSession, requests: Sequence[Request]) -> None:
        """Mark them paid for."""
        ...

    async def expire(self, session: AsyncSession, request: Request) -> None:
        """Mark an open one expired (its checkout expired unpaid)."""
        ...

    def satisfied_by(self, request: Request, entitled_plan_ids: frozenset[str]) -> bool:
        """Whether these plans now unlock what the request was opened for."""
        ...
