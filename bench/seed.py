"""Databases for the benchmark, and the users, tokens and entitlements in them, written before start.

Everything goes through the service's own code: Alembic migrations, `identity.create_personal_token`,
and `billing.subscriptions.apply_subscription` for the entitled user (the same function the webhook
path applies a Stripe subscription with). Only the password hash is computed once and shared by all
bulk users, so seeding hundreds of users does not cost hundreds of argon2 runs.
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
from service.billing.subscriptions import apply_subscription
from service.db.engine import create_engine, create_session_factory
from service.db.migrations import upgrade_to_head
from service.identity import service as identity
from service.identity.models import User
from service.identity.passwords import hash_password
from service.identity.secrets import new_id

POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BENCH_PLAN = "pro"


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


def subscription_object(account: Account, lookup_key: str) -> dict[str, Any]:
    """A Stripe subscription as the webhook path sees it (the fields the service reads)."""
    return {
        "id": account.subscription_id,
        "object": "subscription",
        "customer": account.customer_id,
        "status": "active",
        "cancel_at_period_end": False,
        "items": {
            "object": "list",
            "data": [
                {"current_period_end": int(time.time()) + 30 * 86400, "price": {"lookup_key": lookup_key}}
            ],
        },
        "metadata": {"user_id": account.user_id},
    }


async def seed(
    database_url: str, resource_url: str, *, webhook_customers: int, notify_accounts: int
) -> Seeded:
    catalog = PlanCatalog.load(DEFAULT_PLANS_FILE)
    plan = catalog.get(BENCH_PLAN)
    assert plan is not None, "the default plans name 'pro'"
    engine = create_engine(database_url)
    sessions = create_session_factory(engine)
    password_hash = hash_password(secrets.token_urlsafe(16))
    tag = secrets.token_hex(3)

    async def account(session: Any, username: str, *, customer: bool) -> Account:
        user = User(id=new_id("usr"), username=username, password_hash=password_hash)
        session.add(user)
        await session.flush()
        issued = await identity.create_personal_token(
            session, username, resource=resource_url, label="bench", ttl=None
        )
        result = Account(username, user.id, issued.secret)
        if customer:
            result.customer_id = f"cus_bench_{tag}_{username}"
            result.subscription_id = f"sub_bench_{tag}_{username}"
            session.add(StripeCustomer(user_id=user.id, customer_id=result.customer_id))
            await session.flush()
        return result

    try:
        async with sessions() as session, session.begin():
            entitled = await account(session, "bench-entitled", customer=True)
            change = await apply_subscription(
                session,
                subscription_object(entitled, plan.lookup_key),
                observed_at=int(time.time()),
                catalog=catalog,
            )
            if not (change.applied and change.new_status == "active"):
                raise RuntimeError(f"seeding the entitlement did not apply: {change}")
            unentitled = await account(session, "bench-unentitled", customer=False)
            seeded = Seeded(entitled, unentitled)
            for index in range(webhook_customers):
                seeded.webhook_customers.append(await account(session, f"bench-hook-{index}", customer=True))
            for index in range(notify_accounts):
                seeded.notify_accounts.append(await account(session, f"bench-notify-{index}", customer=True))
        return seeded
    finally:
        await engine.dispose()
