"""Column helpers shared by every table module."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column

from service.db.metadata import UTCDateTime


def utc_column(*, nullable: bool = False, index: bool = False) -> Column[datetime]:
    return Column(UTCDateTime(), nullable=nullable, index=index)
