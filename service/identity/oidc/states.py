"""Single-use sign-in states: the first callback that presents a state consumes it, on any replica.

The login cookie stays valid for its whole lifetime, so without this one cookie and its state could
be replayed to `/oidc/callback` with new codes, each replay an outbound token request.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy.exc import IntegrityError

from service.db.engine import SessionFactory
from service.identity.oidc.models import ConsumedLoginState


def state_hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


async def consume(sessions: SessionFactory, state: str, expires_at: datetime) -> bool:
    """True the first time `state` is presented; False when it was consumed before (a replay)."""
    try:
        async with sessions() as session, session.begin():
            session.add(ConsumedLoginState(state_hash=state_hash(state), expires_at=expires_at))
    except IntegrityError:
        return False  # its primary key is taken: this or another replica consumed the state
    return True
