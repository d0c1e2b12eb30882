"""The per-user ledger of legacy sessions: the cap, and every way a session ends."""

from __future__ import annotations

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext

from service.mcp_server.legacy_sessions import LegacySessions

IDLE = 60.0


def principal(user: str, client_id: str = "pat") -> AuthorizationContext:
    return AuthorizationContext(client_id=client_id, issuer=None, subject=user)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ledger(clock: Clock, ended: list[str]) -> LegacySessions:
    sessions = LegacySessions(max_per_user=2, idle_timeout=IDLE, clock=clock)
    sessions.on_end(ended.append)
    return sessions


def test_openings_in_flight_count_towards_the_cap() -> None:
    sessions = ledger(Clock(), [])
    assert sessions.admit("ada")
    assert sessions.admit("ada")
    assert not sessions.admit("ada"), "two initialize requests not yet answered fill the cap"
    assert sessions.admit("bob")
    sessions.settle("ada", None, principal("ada"))  # refused by the SDK: no session
    assert sessions.admit("ada")


def test_an_idle_session_ends_after_the_timeout_and_a_busy_one_does_not() -> None:
    clock = Clock()
    ended: list[str] = []
    sessions = ledger(clock, ended)
    for session_id in ("idle", "busy"):
        assert sessions.admit("ada")
        sessions.settle("ada", session_id, principal("ada"))
    sessions.request_started("busy")  # a GET stream, say
    clock.now += IDLE + 1
    assert sessions.admit("ada"), "the idle session made room"
    assert ended == ["idle"]
    assert sessions.open_count("ada") == 2, "the busy session and the new one"


async def test_expire_idle_tells_the_listeners() -> None:
    clock = Clock()
    ended: list[str] = []
    sessions = ledger(clock, ended)
    assert sessions.admit("ada")
    sessions.settle("ada", "s1", principal("ada"))
    sessions.request_started("s1")
    sessions.request_finished("s1")
    clock.now += IDLE - 1
    assert await sessions.expire_idle() == 0
    clock.now += 2
    assert await sessions.expire_idle() == 1
    assert ended == ["s1"]
    assert sessions.open_count("ada") == 0


def test_end_is_idempotent_and_frees_the_place() -> None:
    ended: list[str] = []
    sessions = ledger(Clock(), ended)
    for session_id in ("s1", "s2"):
        assert sessions.admit("ada")
        sessions.settle("ada", session_id, principal("ada"))
    assert not sessions.admit("ada")
    sessions.end("s1")
    sessions.end("s1")
    assert ended == ["s1"]
    assert sessions.admit("ada")


def test_only_the_opening_principal_has_the_session() -> None:
    sessions = ledger(Clock(), [])
    assert sessions.admit("ada")
    sessions.settle("ada", "s1", principal("ada"))
    assert sessions.opened_by("s1", principal("ada"))
    assert not sessions.opened_by("s1", principal("ada", client_id="oauth-app")), "same user, other client"
    assert not sessions.opened_by("s1", principal("bob"))
    assert not sessions.opened_by("s2", principal("ada"))
