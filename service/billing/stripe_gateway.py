"""Every call the service makes to Stripe, through stripe-python's async `StripeClient`.

The same code talks to the built-in sandbox and to Stripe itself; only the API base and key
differ. Idempotency keys are derived from our own ids, so a retried request never makes a second
customer or checkout session.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import stripe

from service.billing.plans import Plan, PlanCatalog
from service.billing.redirects import ANY_REDIRECT, RedirectPolicy
from service.billing.stripe_calls import StripeCallObserver, StripeCalls
from service.billing.stripe_fields import field_of, id_of
from service.billing.stripe_reads import StripeReads

# A Stripe object as JSON (a dict), or a stripe-python object (also a Mapping) where one is at hand.
StripeData = Mapping[str, Any] | stripe.StripeObject


class PriceNotFound(Exception):
    """The plan's price does not exist in the configured Stripe account: run `stripe sync-plans`."""


@dataclass(frozen=True)
class CheckoutRequest:
    customer_id: str
    price_id: str
    user_id: str
    elicitation_id: str
    plan_id: str
    success_url: str
    cancel_url: str
    expires_at: int
    idempotency_key: str


@dataclass(frozen=True)
class PaymentTarget:
    subscription_id: str
    invoice_id: str


STRIPE_TIMEOUT_SECONDS = 20
STRIPE_NETWORK_RETRIES = 2


class StripeGateway:
    def __init__(
        self,
        client: stripe.StripeClient,
        http_client: stripe.HTTPClient,
        catalog: PlanCatalog,
        reads: StripeReads,
        redirects: RedirectPolicy = ANY_REDIRECT,
        observer: StripeCallObserver | None = None,
    ) -> None:
        self._client = client
        self._calls = StripeCalls(observer)
        self._redirects = redirects
        self._http_client = http_client
        self._reads = reads
        self._catalog = catalog
        self._price_ids: dict[str, str] = {}

    @classmethod
    def create(
        cls,
        api_key: str,
        api_base: str | None,
        catalog: PlanCatalog,
        redirects: RedirectPolicy = ANY_REDIRECT,
        observer: StripeCallObserver | None = None,
    ) -> StripeGateway:
        """`observer` hears every call's duration and error, by operation (the service's metrics)."""
        # aiohttp, not httpx: a read costs about 0.28 ms of our CPU instead of 0.95 ms (measured
        # against the sandbox), and every webhook event makes one to three reads.
        http_client = stripe.AIOHTTPClient(timeout=aiohttp.ClientTimeout(total=STRIPE_TIMEOUT_SECONDS))
        base_addresses: dict[str, str | None] = {"api": api_base} if api_base else {}
        client = stripe.StripeClient(
            api_key,
            base_addresses=base_addresses,  # type: ignore[arg-type]
            http_client=http_client,
            max_network_retries=STRIPE_NETWORK_RETRIES,
        )
        reads = StripeReads(
            client,
            http_client,
            api_key=api_key,
            api_base=api_base or stripe.DEFAULT_API_BASE,
            api_version=stripe.api_version,
            max_network_retries=STRIPE_NETWORK_RETRIES,
        )
        return cls(client, http_client, catalog, reads, redirects, observer)

    @property
    def client(self) -> stripe.StripeClient:
        return self._client

    async def aclose(self) -> None:
        await self._http_client.close_async()  # type: ignore[no-untyped-call]

    # -- catalog ---------------------------------------------------------------------------

    async def find_price(self, plan: Plan) -> stripe.Price | None:
        with self._calls.timed("list_prices"):
            prices = await self._client.v1.prices.list_async(
                params={"lookup_keys": [plan.lookup_key], "active": True, "limit": 1}
            )
        return prices.data[0] if prices.data else None

    async def price_id(self, plan: Plan) -> str:
        cached = self._price_ids.get(plan.id)
        if cached is not None:
            return cached
        price = await self.find_price(plan)
        if price is None:
            raise PriceNotFound(f"no active Stripe price with lookup key {plan.lookup_key!r}")
        self._price_ids[plan.id] = price.id
        return price.id

    async def sync_plans(self) -> list[tuple[Plan, str, bool]]:
        """Create each plan's product and price unless a price with its lookup key exists.

        Returns (plan, price id, created). A price whose amount, currency or interval differs from
        the plans file is an error to fix in Stripe, not something to overwrite silently.
        """
        results: list[tuple[Plan, str, bool]] = []
        for plan in self._catalog.all():
            price = await self.find_price(plan)
            if price is not None:
                recurring = price.recurring
                if (
                    price.unit_amount != plan.amount
                    or price.currency != plan.currency
                    or recurring is None
                    or recurring.interval != plan.interval
                ):
                    raise PriceNotFound(
                        f"price {price.id} for lookup key {plan.lookup_key!r} does not match plan {plan.id!r}"
                    )
                results.append((plan, price.id, False))
                self._price_ids[plan.id] = price.id
                continue
            with self._calls.timed("create_product"):
                product = await self._client.v1.products.create_async(
                    params={"name": plan.name, "metadata": {"plan_id": plan.id}},
                    options={"idempotency_key": f"product:{plan.lookup_key}"},
                )
            price_key = f"price:{plan.lookup_key}:{plan.amount}:{plan.currency}:{plan.interval}"
            with self._calls.timed("create_price"):
                created = await self._client.v1.prices.create_async(
                    params={
                        "product": product.id,
                        "unit_amount": plan.amount,
                        "currency": plan.currency,
                        "recurring": {"interval": plan.interval},
                        "lookup_key": plan.lookup_key,
                        "metadata": {"plan_id": plan.id},
                    },
                    options={"idempotency_key": price_key},
                )
            self._price_ids[plan.id] = created.id
            results.append((plan, created.id, True))
        return results

    # -- customers and checkout ------------------------------------------------------------

    async def create_customer(self, user_id: str, username: str) -> str:
        with self._calls.timed("create_customer"):
            customer = await self._client.v1.customers.create_async(
                params={"description": username, "metadata": {"user_id": user_id}},
                options={"idempotency_key": f"customer:{user_id}"},
            )
        return customer.id

    async def create_checkout_session(self, request: CheckoutRequest) -> stripe.checkout.Session:
        metadata = {
            "user_id": request.user_id,
            "elicitation_id": request.elicitation_id,
            "plan_id": request.plan_id,
        }
        with self._calls.timed("create_checkout_session"):
            return await self._client.v1.checkout.sessions.create_async(
                params={
                    "mode": "subscription",
                    "customer": request.customer_id,
                    "client_reference_id": request.user_id,
                    "line_items": [{"price": request.price_id, "quantity": 1}],
                    "metadata": metadata,
                    "subscription_data": {"metadata": metadata},
                    "success_url": request.success_url,
                    "cancel_url": request.cancel_url,
                    "expires_at": request.expires_at,
                },
                options={"idempotency_key": request.idempotency_key},
            )

    def checkout_url(self, checkout: stripe.checkout.Session) -> str:
        """Where to send the browser to pay; `UntrustedRedirect` if that is not Stripe's Checkout."""
        return self._redirects.checked(checkout.url)

    async def retrieve_checkout_session(self, session_id: str) -> stripe.checkout.Session:
        with self._calls.timed("retrieve_checkout_session"):
            return await self._client.v1.checkout.sessions.retrieve_async(session_id)

    async def retrieve_subscription(self, subscription_id: str) -> StripeData:
        """The subscription as Stripe's JSON: the webhook path reads only a few fields of it."""
        return await self._read(
            "retrieve_subscription", f"/v1/subscriptions/{quote(subscription_id, safe='')}"
        )

    async def _read(self, operation: str, path: str, **params: Any) -> StripeData:
        """A GET answered as plain JSON (`StripeReads`): auth, retries and errors as stripe-python's.

        Building stripe-python's objects from a response costs about 1 ms of CPU per read
        (measured against the sandbox: 2.6 ms with objects, 1.5 ms raw, client and server), and
        every webhook makes one to three reads that are only looked at through `field_of`.
        """
        with self._calls.timed(operation):
            return await self._reads.get(path, **params)

    async def create_portal_session(self, customer_id: str, return_url: str) -> str:
        """The portal URL to send the browser to; `UntrustedRedirect` if that is not Stripe's portal."""
        with self._calls.timed("create_portal_session"):
            portal = await self._client.v1.billing_portal.sessions.create_async(
                params={"customer": customer_id, "return_url": return_url}
            )
        return self._redirects.checked(portal.url)

    async def payment_target(self, payment_intent_id: str | None) -> PaymentTarget | None:
        """The invoice (and its subscription) that this payment intent paid, if any."""
        if payment_intent_id is None:
            return None
        with self._calls.timed("list_invoice_payments"):
            payments = await self._client.v1.invoice_payments.list_async(
                params={
                    "payment": {"type": "payment_intent", "payment_intent": payment_intent_id},
                    "limit": 1,
                }
            )
        if not payments.data:
            return None
        invoice_ref = payments.data[0].invoice
        with self._calls.timed("retrieve_invoice"):
            invoice = await self._client.v1.invoices.retrieve_async(
                invoice_ref if isinstance(invoice_ref, str) else invoice_ref.id
            )
        details = invoice.parent.subscription_details if invoice.parent else None
        subscription = details.subscription if details else None
        if subscription is None:
            return None
        subscription_id = subscription if isinstance(subscription, str) else subscription.id
        assert invoice.id is not None
        return PaymentTarget(subscription_id=subscription_id, invoice_id=invoice.id)

    async def latest_payment_reversal(self, subscription: StripeData) -> str | None:
        """'disputed' or 'refunded' when the payment for the current period was taken back."""
        invoice_id = id_of(field_of(subscription, "latest_invoice"))
        if invoice_id is None:
            return None
        return await self._reversal_of(await self._invoice_payments(invoice_id))

    async def subscription_with_reversal(
        self, subscription_id: str, invoice_hint: str | None, customer_hint: str | None = None
    ) -> tuple[StripeData, str | None]:
        """The subscription and `latest_payment_reversal`, in one round trip instead of three.

        `invoice_hint` is the invoice a Checkout Session just paid and `customer_hint` its customer:
        usually the subscription's latest invoice, so its payments and the customer's charges are
        read alongside the subscription. When the hint is not current (a renewal happened before a
        late delivery), the latest invoice is read as usual; a payment whose charges are not among
        the customer's is read on its own.
        """
        if invoice_hint is None:
            subscription = await self.retrieve_subscription(subscription_id)
            return subscription, await self.latest_payment_reversal(subscription)
        reads: list[Awaitable[Any]] = [
            self.retrieve_subscription(subscription_id),
            self._invoice_payments(invoice_hint),
        ]
        if customer_hint is not None:
            reads.append(self._read("list_charges", "/v1/charges", customer=customer_hint, limit=100))
        subscription, payments, *customer_charges = await asyncio.gather(*reads)
        if id_of(field_of(subscription, "latest_invoice")) != invoice_hint:
            return subscription, await self.latest_payment_reversal(subscription)
        return subscription, await self._reversal_of(payments, *customer_charges)

    async def _invoice_payments(self, invoice_id: str) -> list[StripeData]:
        page = await self._read("list_invoice_payments", "/v1/invoice_payments", invoice=invoice_id, limit=10)
        return list(field_of(page, "data") or [])

    async def _reversal_of(
        self, payments: list[StripeData], customer_charges: StripeData | None = None
    ) -> str | None:
        complete = customer_charges is not None and not field_of(customer_charges, "has_more")
        known = list(field_of(customer_charges, "data") or []) if complete else []
        for payment in payments:
            payment_intent_id = id_of(field_of(field_of(payment, "payment"), "payment_intent"))
            if payment_intent_id is None:
                continue
            charges = [
                charge for charge in known if id_of(field_of(charge, "payment_intent")) == payment_intent_id
            ]
            if not charges:
                page = await self._read("list_charges", "/v1/charges", payment_intent=payment_intent_id)
                charges = list(field_of(page, "data") or [])
            for charge in charges:
                if field_of(charge, "disputed"):
                    return "disputed"
                if field_of(charge, "refunded"):
                    return "refunded"
        return None

    async def list_subscriptions(self, customer_id: str) -> list[StripeData]:
        """All of the customer's subscriptions, in any status, as JSON."""
        subscriptions: list[StripeData] = []
        async for page in self._pages(
            "list_subscriptions", "/v1/subscriptions", customer=customer_id, status="all"
        ):
            subscriptions.extend(page)
        return subscriptions

    def recent_checkout_pages(self, created_since: int) -> AsyncGenerator[list[StripeData], None]:
        """Checkout Sessions created since then, newest first, a page of up to 100 at a time, as JSON.

        A page of 100 built as stripe-python objects costs about 100 ms of CPU in one piece
        (measured on Stripe's own example session), holding up every request the event loop
        serves meanwhile; as JSON it costs about 5 ms.
        """
        return self._pages("list_checkout_sessions", "/v1/checkout/sessions", created={"gte": created_since})

    async def _pages(
        self, operation: str, path: str, **params: Any
    ) -> AsyncGenerator[list[StripeData], None]:
        """A list endpoint's pages (cursor pagination, 100 per page) as JSON."""
        cursor: dict[str, str] = {}
        while True:
            page = await self._read(operation, path, **params, **cursor, limit=100)
            data: list[StripeData] = list(field_of(page, "data") or [])
            if data:
                yield data
            last = id_of(data[-1]) if data else None
            if not field_of(page, "has_more") or last is None:
                return
            cursor = {"starting_after": last}

    async def events_since(self, created_since: int) -> list[stripe.Event]:
        """Oldest first, the order Stripe created them in."""
        with self._calls.timed("list_events"):
            page = await self._client.v1.events.list_async(
                params={"created": {"gte": created_since}, "limit": 100}
            )
            events = [event async for event in page.auto_paging_iter()]
        return sorted(events, key=lambda event: event.created)
