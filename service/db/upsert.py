"""INSERT … ON CONFLICT for the session's backend: PostgreSQL and SQLite each spell it in their own
SQLAlchemy dialect."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel.ext.asyncio.session import AsyncSession


def dialect_name(session: AsyncSession) -> str:
    """The session's backend; a session with no bind is the default SQLite."""
    return session.bind.dialect.name if session.bind is not None else "sqlite"


def upsert_into(session: AsyncSession, model: Any) -> postgresql.Insert | sqlite.Insert:
    """An INSERT into `model`'s table (a table model or a `Table`) that can take ON CONFLICT."""
    table: Table = model if isinstance(model, Table) else model.__table__
    if dialect_name(session) == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)
