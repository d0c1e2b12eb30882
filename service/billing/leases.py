"""Leases for periodic jobs, so that when every replica runs the same job only one does the work.

A conditional UPDATE (or the INSERT of a missing row) is atomic on PostgreSQL and SQLite alike,
so no advisory locks or extra infrastructure are needed.
"""

from __future__ import annotations

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
