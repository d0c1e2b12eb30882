"""Databases for the benchmark, and the users, tokens and entitlements in them, written before start.

Everything goes through the service's own code: Alembic migrations, `identity.create_personal_token`,
and `billing.subscriptions.apply_subscription` (the function the webhook path applies a Stripe
subscription with). Subscriptions are REAL: each is bought in the bench's one standalone Stripe
sandbox (customer, subscription-mode checkout session, paid with the sandbox's test helper), then its
customer is bound and the subscription object read back from the sandbox is applied. The service
re-reads every subscription a webhook names, so fake ids would answer 502. Only the password hash is
computed once and shared by all bulk users, so seeding hundreds of users does not cost hundreds of
argon2 runs.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from service.billing.models import StripeCustomer
from service.billing.plans import DEFAULT_PLANS_FILE, PlanCatalog
from service.billing.stripe_gateway import CheckoutRequest, StripeGateway
from service.billing.subscriptions import apply_subscription
from service.db.engine import create_engine, create_session_factory
from service.db.migrations import upgrade_to_head
from service.identity import service as identity
from service.identity.models import User
from service.identity.passwords import PasswordHashing
from service.identity.secrets import new_id
from service.settings import Settings

POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
# Unlimited calls: the baseline is a subscription-gated call (Pro counts its included calls).
BENCH_PLAN = "team"
SANDBOX_KEY = "sk_test_sandbox"  # the sandbox's key (service.settings.SANDBOX_SECRET_KEY)
TEST_CARD = "4242424242424242"


@dataclass
class Account:
    username: str
    user_id: str
    token: str
    customer_id: str | None = None
    subscription_id: str | None = None

    def as_customer(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "customer_id": self.customer_id,
            "subscription_id": self.subscription_id,
        }


@dataclass
class Seeded:
    entitled: Account
    unentitled: Account
    webhook_customers: list[Account] = field(default_factory=list)
    notify_accounts: list[Account] = field(default_factory=list)


def sqlite_database(workdir: Path, name: str) -> str:
    url = f"sqlite:///{workdir / name}.db"
    upgrade_to_head(url)
    return url


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def postgres_database() -> tuple[str, str]:
    """A new migrated PostgreSQL database on the local server: (url, name)."""
    name = f"bench_{secrets.token_hex(5)}"
    with psycopg.connect(_libpq(POSTGRES_ADMIN_URL), autocommit=True, connect_timeout=5) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    upgrade_to_head(url)
    return url, name


def drop_postgres_database(name: str) -> None:
    with psycopg.connect(_libpq(POSTGRES_ADMIN_URL), autocommit=True, connect_timeout=5) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def postgres_available() -> bool:
    try:
        with psycopg.connect(_libpq(POSTGRES_ADMIN_URL), connect_timeout=3):
            return True
    except psycopg.Error:
        return False


@dataclass
class Stripe:
    """The bench's sandbox, through the service's own gateway (stripe-python)."""

    gateway: StripeGateway
    plan_id: str
    price_id: str

    @classmethod
    async def connect(cls, api_base: str) -> Stripe:
        catalog = PlanCatalog.load(DEFAULT_PLANS_FILE)
        gateway = StripeGateway.create(SANDBOX_KEY, api_base, catalog)
        prices = {plan.id: price_id for plan, price_id, _ in await gateway.sync_plans()}
        return cls(gateway, BENCH_PLAN, prices[BENCH_PLAN])

    async def aclose(self) -> None:
        await self.gateway.aclose()

    async def checkout(self, account: Account, elicitation_id: str) -> Any:
        """An open subscription-mode checkout session for the account's customer."""
        assert account.customer_id is not None
        return await self.gateway.create_checkout_session(
            CheckoutRequest(
                customer_id=account.customer_id,
                price_id=self.price_id,
                user_id=account.user_id,
                elicitation_id=elicitation_id,
                plan_id=self.plan_id,
                success_url="http://127.0.0.1/bench/success",
                cancel_url="http://127.0.0.1/bench/cancel",
                expires_at=int(time.time()) + 3600,
                idempotency_key=f"bench-checkout:{account.user_id}:{elicitation_id}:{time.monotonic_ns()}",
            )
        )

    async def pay(self, checkout_id: str) -> Any:
        """Pays the session with the test card; the paid session (with its subscription)."""
        await self.gateway.client.raw_request_async(
            "post", f"/v1/test_helpers/checkout/sessions/{checkout_id}/pay", card_number=TEST_CARD
        )
        return await self.gateway.retrieve_checkout_session(checkout_id)

    async def completed_event(self, checkout_id: str) -> dict[str, Any]:
        """The sandbox's own `checkout.session.completed` event for the session, as JSON."""
        page = await self.gateway.client.v1.events.list_async(
            params={"type": "checkout.session.completed", "limit": 20}
        )
        for event in page.data:
            if event.data.object.id == checkout_id:
                document: dict[str, Any] = event.to_dict()
                return document
        raise RuntimeError(f"the sandbox has no checkout.session.completed for {checkout_id}")

    async def subscribe(self, account: Account) -> Any:
        """Buys the plan for the account; the real subscription object, read back from the sandbox."""
        checkout = await self.checkout(account, f"eli_bench_seed_{account.user_id}")
        paid = await self.pay(checkout.id)
        if paid.payment_status != "paid" or paid.subscription is None:
            raise RuntimeError(f"sandbox checkout {checkout.id} did not pay: {paid.payment_status}")
        subscription_id = paid.subscription if isinstance(paid.subscription, str) else paid.subscription.id
        account.subscription_id = subscription_id
        return await self.gateway.retrieve_subscription(subscription_id)


async def seed(
    database_url: str,
    resource_url: str,
    stripe: Stripe,
    *,
    webhook_customers: int,
    notify_accounts: int,
) -> Seeded:
    catalog = PlanCatalog.load(DEFAULT_PLANS_FILE)
    engine = create_engine(database_url)
    sessions = create_session_factory(engine)
    password_hash = await PasswordHashing.from_settings(Settings(_env_file=None).password_hashing).hash(
        secrets.token_urlsafe(16)
    )
    tag = secrets.token_hex(3)

    async def account(session: Any, username: str, *, customer: bool, subscribed: bool = False) -> Account:
        user = User(id=new_id("usr"), username=f"{username}-{tag}", password_hash=password_hash)
        session.add(user)
        await session.flush()
        issued = await identity.create_personal_token(
            session, user.username, resource=resource_url, label="bench", ttl=None
        )
        result = Account(user.username, user.id, issued.secret)
        if customer:
            result.customer_id = await stripe.gateway.create_customer(user.id, user.username)
            session.add(StripeCustomer(user_id=user.id, customer_id=result.customer_id))
            await session.flush()
        if subscribed:
            subscription = await stripe.subscribe(result)
            change = await apply_subscription(
                session, subscription, observed_at=int(time.time()), catalog=catalog
            )
            if not (change.applied and change.new_status == "active"):
                raise RuntimeError(f"seeding {username}'s subscription did not apply: {change}")
        return result

    try:
        async with sessions() as session, session.begin():
            entitled = await account(session, "bench-entitled", customer=True, subscribed=True)
            unentitled = await account(session, "bench-unentitled", customer=False)
            seeded = Seeded(entitled, unentitled)
            for index in range(webhook_customers):
                seeded.webhook_customers.append(
                    await account(session, f"bench-hook-{index}", customer=True, subscribed=True)
                )
            for index in range(notify_accounts):
                seeded.notify_accounts.append(await account(session, f"bench-notify-{index}", customer=True))
        return seeded
    finally:
        await engine.dispose()
