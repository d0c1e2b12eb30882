"""A running service under test, and the real objects tests need from it (users, tokens)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import httpx
import stripe
from fastapi import FastAPI
from mcp import Client
from sqlmodel import SQLModel

from service.app import create_app
from service.identity import service as identity
from service.identity.models import User
from service.identity.passwords import PasswordHashing
from service.runtime import Runtime
from service.settings import Settings
from stripe_sandbox import Sandbox
from tests.support.mcp_clients import bearer_transport
from tests.support.servers import bound_socket, port_of, serve

RowT = TypeVar("RowT", bound=SQLModel)

DEFAULT_PASSWORD = "correct horse battery"
# The suite signs in hundreds of times; argon2's cost is a setting, not what it tests. Services the
# tests start as processes (replicas, the CLI) keep the production defaults. Flat names, which
# Settings reads through its customised sources: its typed __init__ lists only the sections.
CHEAP_PASSWORD_HASHING: dict[str, Any] = {
    "password_hash_time_cost": 1,
    "password_hash_memory_kib": 64,
    "password_hash_parallelism": 1,
}


def cheap_password_hashing() -> PasswordHashing:
    return PasswordHashing.from_settings(Settings(_env_file=None, **CHEAP_PASSWORD_HASHING).password_hashing)


def make_settings(database_url: str, port: int, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "public_base_url": f"http://127.0.0.1:{port}",
        "port": port,
        "log_level": "WARNING",
        "stripe_sandbox_port": 0,
        "stripe_sandbox_state_file": None,
        **CHEAP_PASSWORD_HASHING,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)


@dataclass
class RunningService:
    base_url: str
    settings: Settings
    app: FastAPI

    @property
    def runtime(self) -> Runtime:
        runtime: Runtime = self.app.state.runtime
        return runtime

    @property
    def sandbox(self) -> Sandbox:
        assert self.runtime.sandbox is not None, "this service talks to another Stripe"
        return self.runtime.sandbox

    @property
    def stripe(self) -> stripe.StripeClient:
        return self.runtime.stripe.client

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[Any]:
        async with self.runtime.sessions() as session, session.begin():
            yield session

    async def rows(self, model: type[RowT], **where: Any) -> list[RowT]:
        """Rows of a table, read through the service's own engine."""
        from sqlmodel import select

        statement = select(model)
        for name, value in where.items():
            statement = statement.where(getattr(model, name) == value)
        async with self.runtime.sessions() as session:
            return list((await session.exec(statement)).all())

    async def add_user(self, username: str, password: str = DEFAULT_PASSWORD) -> User:
        async with self._session() as session:
            return await identity.create_user(session, username, password, self.runtime.passwords)

    async def personal_token(
        self, username: str, *, resource: str | None = None, ttl: timedelta | None = None
    ) -> identity.IssuedToken:
        async with self._session() as session:
            return await identity.create_personal_token(
                session,
                username,
                resource=resource or self.settings.http.mcp_resource_url,
                label="test",
                ttl=ttl,
            )

    async def revoke(self, token_id: str) -> bool:
        async with self._session() as session:
            return await identity.revoke_token_by_id(session, token_id)

    def http(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, timeout=10.0, **kwargs)

    def mcp_client(self, token: str, **kwargs: Any) -> Client:
        return Client(bearer_transport(self.mcp_url, token), **kwargs)


@asynccontextmanager
async def run_service(database_url: str, **overrides: Any) -> AsyncIterator[RunningService]:
    sock = bound_socket()
    async with run_service_on(make_settings(database_url, port_of(sock), **overrides), sock) as running:
        yield running


@asynccontextmanager
async def run_service_on(
    settings: Settings, sock: socket.socket, *, metrics_listener: socket.socket | None = None
) -> AsyncIterator[RunningService]:
    app = create_app(settings, metrics_listener=metrics_listener)
    async with serve(app, sock) as base_url:
        yield RunningService(base_url=base_url, settings=settings, app=app)
