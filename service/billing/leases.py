"""Leases for periodic jobs, so that when every replica runs the same job only one does the work.

A conditional UPDATE (or the INSERT of a missing row) is atomic on PostgreSQL and SQLite alike,
so no advisory locks or extra infrastructure are needed.
"""

from __future__ import annotations

import time
from datetime import timedelta

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from service.billing.models import JobLease
from service.db.engine import SessionFactory
from service.db.metadata import utcnow


async def try_acquire(sessions: SessionFactory, name: str, holder: str, ttl: timedelta) -> bool:
    now = utcnow()
    async with sessions() as session, session.begin():
        taken = await session.exec(
            update(JobLease)
            .where(col(JobLease.name) == name)
            .where((col(JobLease.expires_at) <= now) | (col(JobLease.holder) == holder))
            .values(holder=holder, expires_at=now + ttl)
        )
        if taken.rowcount == 1:
            return True
        if await session.get(JobLease, name) is not None:
            return False
    try:
        async with sessions() as session, session.begin():
            session.add(JobLease(name=name, holder=holder, expires_at=now + ttl))
        return True
    except IntegrityError:
        return False  # another replica created the row first


async def release(sessions: SessionFactory, name: str, holder: str) -> None:
    async with sessions() as session, session.begin():
        await session.exec(
            update(JobLease)
            .where(col(JobLease.name) == name, col(JobLease.holder) == holder)
            .values(expires_at=utcnow())
        )


class LeaseLost(Exception):
    """The lease expired and another holder has it now; the work under it should stop."""


class HeldLease:
    """A lease taken for a job that may outlast its term: `keep()` between the job's steps renews
    it once half the term has passed, and raises `LeaseLost` if another holder took it meanwhile."""

    def __init__(self, sessions: SessionFactory, name: str, holder: str, ttl: timedelta) -> None:
        self._sessions = sessions
        self._name = name
        self._holder = holder
        self._ttl = ttl
        self._renew_at = 0.0

    async def acquire(self) -> bool:
        if not await try_acquire(self._sessions, self._name, self._holder, self._ttl):
            return False
        self._renew_at = time.monotonic() + self._ttl.total_seconds() / 2
        return True

    async def keep(self) -> None:
        if time.monotonic() < self._renew_at:
            return
        if not await self.acquire():
            raise LeaseLost(self._name)

    async def release(self) -> None:
        await release(self._sessions, self._name, self._holder)
