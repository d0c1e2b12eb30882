"""Log records that can be queued as they are: the access line's, one per request.

`Logger.log` looks up the caller's frame, and the queue handler (service/observability/logs.py)
copies each record and renders its message on the event loop, since a record's arguments could
change once the call returns. A `ReadyRecord` holds only immutable values (str, int, float, bool,
None, tuples of them), so it goes on the queue as it is, and the writer thread renders it. It
carries its own context (request id, user, elicitation, trace ids): the context filter leaves it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

Immutable = str | int | float | bool | None | tuple[Any, ...]


class ReadyRecord(logging.LogRecord):
    """A record whose `args` and extra fields are immutable values."""


# What `Logger.makeRecord` refuses as `extra=` keys: the record's own attributes.
RESERVED = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def emit(
    logger: logging.Logger, level: int, msg: str, args: tuple[Immutable, ...], fields: Mapping[str, Immutable]
) -> None:
    """`logger.log(level, msg, *args, extra=fields)` for immutable values, without the caller lookup;
    the caller has checked `logger.isEnabledFor(level)`. Like `extra=`, `fields` may not name one of
    the record's own attributes (KeyError)."""
    if not RESERVED.isdisjoint(fields):
        raise KeyError(f"attempt to overwrite {sorted(RESERVED.intersection(fields))} in a LogRecord")
    record = ReadyRecord(logger.name, level, "", 0, msg, args, None)
    record.__dict__.update(fields)
    logger.handle(record)
