"""Every call the service makes to Stripe, through stripe-python's async `StripeClient`.

The same code talks to the built-in sandbox and to Stripe itself; only the API base and key
differ. Idempotency keys are derived from our own ids, so a retried request never makes a second
customer or checkout session.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncGenerator, Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
import stripe
from stripe.params.checkout import SessionCreateParamsLineItem
from stripe.params.v2.billing import MeterEventStreamCreateParams

from service.billing.pack_sales import sale_metadata
from service.billing.plans import CreditPack, MeteredPrice, Plan, PlanCatalog
from service.billing.redirects import ANY_REDIRECT, RedirectPolicy
from service.billing.stripe_calls import StripeCallObserver, StripeCalls
from service.billing.stripe_fields import field_of, id_of
from service.billing.stripe_reads import StripeReads

# A Stripe object as JSON (a dict), or a stripe-python object where one is at hand (not a Mapping,
# but read by key the same way).
StripeData = Mapping[str, Any] | stripe.StripeObject
# How a payment was taken back, when it was: its charge refunded in full, or disputed.
PaymentReversal = Literal["refunded", "disputed"]
# Dispute statuses under which the merchant keeps the payment: a won chargeback, and an issuer's
# inquiry, open or closed, which withdraws nothing unless it escalates to a chargeback. The charge
# stays `disputed` through all of them, so only the dispute's own status tells; any other status,
# one Stripe adds later included, counts as taking the payment.
PAYMENT_STANDS_DISPUTE_STATUSES = frozenset(
    {"won", "warning_needs_response", "warning_under_review", "warning_closed"}
)


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
    # Metered prices billed alongside the plan's own (its overage, or every call when pay as you go).
    metered_price_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class CreditCheckoutRequest:
    customer_id: str
    price_id: str
    user_id: str
    elicitation_id: str
    pack: CreditPack
    success_url: str
    cancel_url: str
    expires_at: int
    idempotency_key: str


METER_EVENTS_PER_REQUEST = 100  # the most Stripe's meter event stream takes in one request


def _rfc3339(timestamp: int) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class MeterEvent:
    """One call to report: `identifier` is our usage row's id, so Stripe counts it once however
    often it is sent."""

    event_name: str
    customer_id: str
    identifier: str
    timestamp: int
    value: int = 1


CatalogItem = Plan | CreditPack | MeteredPrice


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
        self._price_ids: dict[str, str] = {}  # by lookup key
        self._meter_ids: dict[str, str] = {}  # by event name
        self._meter_session: tuple[str, float] | None = None  # stream token, expiry (epoch seconds)
        self._meter_session_lock = asyncio.Lock()

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
        # aiohttp, not httpx: its reads cost a third of the CPU, and every webhook event makes one
        # to three reads (docs/adr/0008-measured-choices.md).
        http_client = stripe.AIOHTTPClient(timeout=aiohttp.ClientTimeout(total=STRIPE_TIMEOUT_SECONDS))
        # A sandbox serves the meter event stream (Stripe's meter-events host) at the same address.
        base_addresses: dict[str, str | None] = (
            {"api": api_base, "meter_events": api_base} if api_base else {}
        )
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

    async def find_price(self, item: CatalogItem) -> stripe.Price | None:
        with self._calls.timed("list_prices"):
            prices = await self._client.v1.prices.list_async(
                params={"lookup_keys": [item.lookup_key], "active": True, "limit": 1}
            )
        return prices.data[0] if prices.data else None

    async def price_id(self, item: CatalogItem) -> str:
        cached = self._price_ids.get(item.lookup_key)
        if cached is not None:
            return cached
        price = await self.find_price(item)
        if price is None:
            raise PriceNotFound(f"no active Stripe price with lookup key {item.lookup_key!r}")
        self._price_ids[item.lookup_key] = price.id
        return price.id

    async def sync_plans(self) -> list[tuple[CatalogItem, str, bool]]:
        """Create each catalog price (plans, metered prices with their meters, credit packs) and its
        product unless a price with its lookup key exists.

        Returns (item, price id, created). A price whose amount, currency, interval or kind differs
        from the plans file is an error to fix in Stripe, not something to overwrite silently.
        """
        results: list[tuple[CatalogItem, str, bool]] = []
        for plan in self._catalog.all():
            params: dict[str, Any] = {
                "unit_amount": plan.amount,
                "currency": plan.currency,
                "recurring": {"interval": plan.interval},
                "metadata": {"plan_id": plan.id},
            }
            results.append(await self._synced_price(plan, plan.name, {"plan_id": plan.id}, params))
        for metered in self._catalog.metered_prices():
            meter_id = await self.meter_id(metered, create=True)
            params = {
                "unit_amount": metered.unit_amount,
                "currency": metered.currency,
                "recurring": {"interval": metered.interval, "usage_type": "metered", "meter": meter_id},
                "metadata": {"metered_tool": metered.tool},
            }
            name = f"{metered.tool} calls"
            results.append(await self._synced_price(metered, name, {"metered_tool": metered.tool}, params))
        for pack in self._catalog.credit_packs():
            params = {
                "unit_amount": pack.amount,
                "currency": pack.currency,
                "metadata": {"credit_pack_id": pack.id, "credits": str(pack.credits)},
            }
            results.append(await self._synced_price(pack, pack.name, {"credit_pack_id": pack.id}, params))
        return results

    async def _synced_price(
        self, item: CatalogItem, product_name: str, product_metadata: dict[str, str], params: dict[str, Any]
    ) -> tuple[CatalogItem, str, bool]:
        price = await self.find_price(item)
        if price is not None:
            if not _price_matches(price, params):
                raise PriceNotFound(
                    f"price {price.id} for lookup key {item.lookup_key!r} does not match the plans file"
                )
            self._price_ids[item.lookup_key] = price.id
            return item, price.id, False
        with self._calls.timed("create_product"):
            product = await self._client.v1.products.create_async(
                params={"name": product_name, "metadata": product_metadata},
                options={"idempotency_key": f"product:{item.lookup_key}"},
            )
        recurring = params.get("recurring") or {}
        price_key = ":".join(
            str(part)
            for part in (
                "price",
                item.lookup_key,
                params["unit_amount"],
                params["currency"],
                recurring.get("interval", "once"),
                recurring.get("meter", ""),
            )
        )
        with self._calls.timed("create_price"):
            created = await self._client.v1.prices.create_async(
                params={"product": product.id, "lookup_key": item.lookup_key, **params},  # type: ignore[typeddict-item]
                options={"idempotency_key": price_key},
            )
        self._price_ids[item.lookup_key] = created.id
        return item, created.id, True

    # -- meters ----------------------------------------------------------------------------

    async def meter_id(self, metered: MeteredPrice, *, create: bool = False) -> str:
        """The id of the active Billing Meter counting `metered.event_name` (made when `create`)."""
        cached = self._meter_ids.get(metered.event_name)
        if cached is not None:
            return cached
        with self._calls.timed("list_meters"):
            page = await self._client.v1.billing.meters.list_async(params={"status": "active", "limit": 100})
            meters = [meter async for meter in page.auto_paging_iter()]
        found = next((meter for meter in meters if meter.event_name == metered.event_name), None)
        if found is None:
            if not create:
                raise PriceNotFound(f"no active Stripe meter for event {metered.event_name!r}")
            with self._calls.timed("create_meter"):
                found = await self._client.v1.billing.meters.create_async(
                    params={
                        "display_name": f"{metered.tool} calls",
                        "event_name": metered.event_name,
                        "default_aggregation": {"formula": "sum"},
                        "customer_mapping": {"event_payload_key": "stripe_customer_id", "type": "by_id"},
                        "value_settings": {"event_payload_key": "value"},
                    },
                    options={"idempotency_key": f"meter:{metered.event_name}"},
                )
        self._meter_ids[metered.event_name] = found.id
        return found.id

    async def send_meter_events(self, events: Sequence[MeterEvent]) -> None:
        """Report up to METER_EVENTS_PER_REQUEST calls in one request to Stripe's meter event
        stream (API v2), which counts an `identifier` once in 24 hours however often it is sent.
        Stripe checks each event's meaning later and reports problems through the meter's error
        reports; this raises only when the request itself was refused."""
        if not events:
            return
        if len(events) > METER_EVENTS_PER_REQUEST:
            raise ValueError(f"at most {METER_EVENTS_PER_REQUEST} meter events a request")
        params: MeterEventStreamCreateParams = {
            "events": [
                {
                    "event_name": event.event_name,
                    "identifier": event.identifier,
                    "timestamp": _rfc3339(event.timestamp),
                    "payload": {"stripe_customer_id": event.customer_id, "value": str(event.value)},
                }
                for event in events
            ]
        }
        # The same batch sent again (a network retry) replays Stripe's first answer.
        digest = hashlib.sha256("\n".join(event.identifier for event in events).encode()).hexdigest()

        async def send(token: str) -> None:
            await self._client.v2.billing.meter_event_stream.create_async(
                params, options={"api_key": token, "idempotency_key": f"meter-events:{digest}"}
            )

        token = await self._meter_event_token()
        with self._calls.timed("create_meter_events"):
            try:
                await send(token)
            except (stripe.TemporarySessionExpiredError, stripe.AuthenticationError):
                # The session ran out (or the sandbox behind it restarted): once more on a new one.
                await send(await self._meter_event_token(expired=token))

    async def _meter_event_token(self, *, expired: str | None = None) -> str:
        """The meter event stream's session token, made again a minute before it runs out or
        once `expired` (the token a request was refused with) is still the current one."""
        async with self._meter_session_lock:
            current = self._meter_session
            if current is not None and current[0] != expired and current[1] - time.time() > 60:
                return current[0]
            with self._calls.timed("create_meter_event_session"):
                session = await self._client.v2.billing.meter_event_session.create_async()
            expires_at = datetime.fromisoformat(session.expires_at).timestamp()
            self._meter_session = (session.authentication_token, expires_at)
            return session.authentication_token

    async def meter_usage(self, metered: MeteredPrice, customer_id: str, start: int, end: int) -> int:
        """What Stripe's meter counted for the customer between `start` and `end` (whole minutes)."""
        meter_id = await self.meter_id(metered)
        total = 0
        with self._calls.timed("list_meter_event_summaries"):
            page = await self._client.v1.billing.meters.event_summaries.list_async(
                meter_id,
                params={"customer": customer_id, "start_time": start, "end_time": end, "limit": 100},
            )
            async for summary in page.auto_paging_iter():
                total += int(summary.aggregated_value)
        return total

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
        line_items: list[SessionCreateParamsLineItem] = [{"price": request.price_id, "quantity": 1}]
        # Stripe refuses a quantity on a metered price: usage sets it.
        line_items.extend({"price": price_id} for price_id in request.metered_price_ids)
        with self._calls.timed("create_checkout_session"):
            return await self._client.v1.checkout.sessions.create_async(
                params={
                    "mode": "subscription",
                    "customer": request.customer_id,
                    "client_reference_id": request.user_id,
                    "line_items": line_items,
                    "metadata": metadata,
                    "subscription_data": {"metadata": metadata},
                    "success_url": request.success_url,
                    "cancel_url": request.cancel_url,
                    "expires_at": request.expires_at,
                },
                options={"idempotency_key": request.idempotency_key},
            )

    async def create_credit_checkout_session(self, request: CreditCheckoutRequest) -> stripe.checkout.Session:
        """Checkout in payment mode for a credit pack; the webhook grants the credits once paid."""
        # The pack as sold now: its grant pays out this, whatever the catalog says by then.
        metadata = {
            "user_id": request.user_id,
            "elicitation_id": request.elicitation_id,
            **sale_metadata(request.pack),
        }
        with self._calls.timed("create_checkout_session"):
            return await self._client.v1.checkout.sessions.create_async(
                params={
                    "mode": "payment",
                    "customer": request.customer_id,
                    "client_reference_id": request.user_id,
                    "line_items": [{"price": request.price_id, "quantity": 1}],
                    "metadata": metadata,
                    "payment_intent_data": {"metadata": metadata},
                    "success_url": request.success_url,
                    "cancel_url": request.cancel_url,
                    "expires_at": request.expires_at,
                },
                options={"idempotency_key": request.idempotency_key},
            )

    def checkout_url(self, checkout: stripe.checkout.Session) -> str:
        """Where to send the browser to pay; `UntrustedRedirect` if that is not Stripe's Checkout."""
        return self._redirects.checked(checkout.url)

    async def retrieve_payment_intent(self, payment_intent_id: str) -> StripeData:
        """The payment intent as Stripe's JSON (its metadata names a credit purchase)."""
        return await self._read(
            "retrieve_payment_intent", f"/v1/payment_intents/{quote(payment_intent_id, safe='')}"
        )

    async def retrieve_checkout_session(self, session_id: str) -> stripe.checkout.Session:
        with self._calls.timed("retrieve_checkout_session"):
            return await self._client.v1.checkout.sessions.retrieve_async(session_id)

    async def expire_checkout_session(self, session_id: str) -> None:
        """End an open Checkout Session, so that it can no longer be paid."""
        with self._calls.timed("expire_checkout_session"):
            await self._client.v1.checkout.sessions.expire_async(session_id)

    async def retrieve_subscription(self, subscription_id: str) -> StripeData:
        """The subscription as Stripe's JSON: the webhook path reads only a few fields of it."""
        return await self._read(
            "retrieve_subscription", f"/v1/subscriptions/{quote(subscription_id, safe='')}"
        )

    async def _read(self, operation: str, path: str, **params: Any) -> StripeData:
        """A GET answered as plain JSON (`StripeReads`): auth, retries and errors as stripe-python's.

        Building stripe-python's objects from a response is most of a read's CPU
        (docs/adr/0008-measured-choices.md), and every webhook makes one to three reads that are
        only looked at through `field_of`.
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

    async def latest_payment_reversal(self, subscription: StripeData) -> PaymentReversal | None:
        """'disputed' or 'refunded' when the payment for the current period was taken back."""
        invoice_id = id_of(field_of(subscription, "latest_invoice"))
        if invoice_id is None:
            return None
        return await self._reversal_of(await self._invoice_payments(invoice_id))

    async def subscription_with_reversal(
        self, subscription_id: str, invoice_hint: str | None, customer_hint: str | None = None
    ) -> tuple[StripeData, PaymentReversal | None]:
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

    async def payment_reversal(self, payment_intent_id: str) -> PaymentReversal | None:
        """'disputed' or 'refunded' when a one-time payment's charge was taken back, else None."""
        page = await self._read("list_charges", "/v1/charges", payment_intent=payment_intent_id)
        for charge in field_of(page, "data") or []:
            reversal = await self._charge_reversal(charge)
            if reversal is not None:
                return reversal
        return None

    async def _charge_reversal(self, charge: StripeData) -> PaymentReversal | None:
        """'disputed' while a dispute of the charge is open or lost, else 'refunded' when refunded in
        full, else None."""
        if field_of(charge, "disputed") and await self._dispute_takes_payment(charge):
            return "disputed"
        if field_of(charge, "refunded"):
            return "refunded"
        return None

    async def _dispute_takes_payment(self, charge: StripeData) -> bool:
        """Whether a dispute of this (disputed) charge takes its payment (an open, lost or appealed
        chargeback): read only for disputed charges."""
        charge_id = id_of(charge)
        if charge_id is None:
            return True
        page = await self._read("list_disputes", "/v1/disputes", charge=charge_id, limit=10)
        disputes = list(field_of(page, "data") or [])
        # No dispute listed for a charge Stripe says is disputed: trust the charge.
        return not disputes or any(
            field_of(dispute, "status") not in PAYMENT_STANDS_DISPUTE_STATUSES for dispute in disputes
        )

    async def _invoice_payments(self, invoice_id: str) -> list[StripeData]:
        page = await self._read("list_invoice_payments", "/v1/invoice_payments", invoice=invoice_id, limit=10)
        return list(field_of(page, "data") or [])

    async def _reversal_of(
        self, payments: list[StripeData], customer_charges: StripeData | None = None
    ) -> PaymentReversal | None:
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
                reversal = await self._charge_reversal(charge)
                if reversal is not None:
                    return reversal
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

        A page built as stripe-python objects takes the event loop for far longer than as JSON, in
        one piece, holding up every request it serves meanwhile (docs/adr/0008-measured-choices.md).
        """
        return self._pages("list_checkout_sessions", "/v1/checkout/sessions", created={"gte": created_since})

    def recent_event_pages(
        self, created_since: int, types: Iterable[str]
    ) -> AsyncGenerator[list[StripeData], None]:
        """Events of these types (at most 20, Stripe's limit) created since then, newest first, a
        page of up to 100 at a time, as JSON."""
        return self._pages("list_events", "/v1/events", created={"gte": created_since}, types=sorted(types))

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


def _price_matches(price: stripe.Price, params: Mapping[str, Any]) -> bool:
    """Whether an existing price bills what the plans file says (amount, currency, kind, interval)."""
    if price.unit_amount != params["unit_amount"] or price.currency != params["currency"]:
        return False
    wanted = params.get("recurring")
    recurring = price.recurring
    if wanted is None or recurring is None:
        return wanted is None and recurring is None
    return bool(
        recurring.interval == wanted["interval"]
        and recurring.usage_type == wanted.get("usage_type", "licensed")
        and (wanted.get("meter") is None or recurring.meter == wanted["meter"])
    )
