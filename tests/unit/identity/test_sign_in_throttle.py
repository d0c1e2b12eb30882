"""The failed sign-in throttle's lockouts, on a clock the test moves."""

from __future__ import annotations

from service.identity.throttle import Attempt, SignInThrottle, ThrottlePolicy, ip_key

POLICY = ThrottlePolicy(
    account_failures=3,
    ip_failures=5,
    lockout_seconds=30.0,
    lockout_max_seconds=120.0,
    memory_seconds=3600.0,
    max_entries=100,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fail(throttle: SignInThrottle, *, account: str | None, client_ip: str | None) -> None:
    """One attempt that the password check refused."""
    attempt = throttle.reserve(account=account, client_ip=client_ip)
    assert isinstance(attempt, Attempt), "the attempt was let through"
    attempt.failed()


def test_an_account_is_locked_after_k_failures_until_the_window_passes() -> None:
    clock = Clock()
    throttle = SignInThrottle(POLICY, clock)
    for _ in range(2):
        fail(throttle, account="ann", client_ip="192.0.2.1")
        assert throttle.retry_after(account="ann", client_ip="192.0.2.9") is None
    fail(throttle, account="ann", client_ip="192.0.2.1")
    assert throttle.retry_after(account="ann", client_ip="192.0.2.9") == 30
    assert throttle.retry_after(account="bob", client_ip="192.0.2.9") is None
    clock.now += 29.5
    assert throttle.retry_after(account="ann", client_ip="192.0.2.9") == 1
    clock.now += 0.5
    assert throttle.retry_after(account="ann", client_ip="192.0.2.9") is None


def test_each_further_failure_doubles_the_lockout_up_to_the_cap() -> None:
    clock = Clock()
    throttle = SignInThrottle(POLICY, clock)
    waits: list[int | None] = []
    for _ in range(6):
        if waits and waits[-1] is not None:
            clock.now += waits[-1]  # the next attempt once the lockout is over
        fail(throttle, account="ann", client_ip=None)
        waits.append(throttle.retry_after(account="ann", client_ip=None))
    assert waits == [None, None, 30, 60, 120, 120]


def test_a_success_clears_the_account_but_not_the_address() -> None:
    throttle = SignInThrottle(POLICY, Clock())
    for n in range(4):
        fail(throttle, account=f"user{n}", client_ip="192.0.2.1")
    fail(throttle, account="user4", client_ip=None)
    success = throttle.reserve(account="user4", client_ip="192.0.2.1")
    assert isinstance(success, Attempt)
    success.succeeded()
    assert throttle.retry_after(account="user4", client_ip=None) is None
    fail(throttle, account="user5", client_ip="192.0.2.1")  # the address's fifth failure
    assert throttle.retry_after(account="other", client_ip="192.0.2.1") == 30


def test_failures_are_forgotten_after_a_quiet_spell_and_the_table_is_bounded() -> None:
    clock = Clock()
    throttle = SignInThrottle(POLICY, clock)
    fail(throttle, account="ann", client_ip=None)
    fail(throttle, account="ann", client_ip=None)
    clock.now += 3601
    fail(throttle, account="ann", client_ip=None)
    assert throttle.retry_after(account="ann", client_ip=None) is None
    for n in range(500):
        fail(throttle, account=f"spray{n}", client_ip=None)
    assert len(throttle) <= POLICY.max_entries


def test_ipv6_clients_share_their_slash_64() -> None:
    assert ip_key("2001:db8:1:2::1") == ip_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert ip_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert ip_key("192.0.2.7") == "192.0.2.7"


def test_attempts_under_way_hold_places_up_to_the_threshold() -> None:
    throttle = SignInThrottle(POLICY, Clock())
    attempts = [throttle.reserve(account="ann", client_ip="192.0.2.1") for _ in range(4)]
    held = [attempt for attempt in attempts if isinstance(attempt, Attempt)]
    assert len(held) == 3 and attempts[3] == 1  # the fourth waits for the three under way
    held[0].release()
    retry = throttle.reserve(account="ann", client_ip="192.0.2.1")
    assert isinstance(retry, Attempt)  # a released place is free again
    for attempt in [*held[1:], retry]:
        attempt.failed()
    assert throttle.retry_after(account="ann", client_ip=None) == 30  # the three places became failures


def test_after_a_lockout_one_attempt_at_a_time() -> None:
    clock = Clock()
    throttle = SignInThrottle(POLICY, clock)
    for _ in range(3):
        fail(throttle, account="ann", client_ip=None)
    assert throttle.reserve(account="ann", client_ip=None) == 30
    clock.now += 30
    first = throttle.reserve(account="ann", client_ip=None)
    assert isinstance(first, Attempt)
    assert throttle.reserve(account="ann", client_ip=None) == 1
    first.failed()
    assert throttle.reserve(account="ann", client_ip=None) == 60


def test_a_known_device_is_counted_apart_from_the_account() -> None:
    throttle = SignInThrottle(POLICY, Clock())
    for n in range(3):
        stranger = throttle.reserve(account="ann", client_ip=f"192.0.2.{n}")
        assert isinstance(stranger, Attempt)
        stranger.failed()
    assert throttle.reserve(account="ann", client_ip="198.51.100.1") == 30
    owner = throttle.reserve(account="ann", client_ip="198.51.100.1", device="d1")
    assert isinstance(owner, Attempt)
    owner.succeeded()
    # The owner's success does not unlock the account for browsers it does not know.
    assert throttle.reserve(account="ann", client_ip="198.51.100.1") == 30
    for _ in range(3):
        typo = throttle.reserve(account="ann", client_ip="198.51.100.1", device="d1")
        assert isinstance(typo, Attempt)
        typo.failed()
    assert throttle.reserve(account="ann", client_ip="198.51.100.1", device="d1") == 30
    assert isinstance(throttle.reserve(account="ann", client_ip="198.51.100.1", device="d2"), Attempt)


def test_settled_attempts_leave_no_entries_and_reservations_are_bounded() -> None:
    throttle = SignInThrottle(POLICY, Clock())
    attempt = throttle.reserve(account="ann", client_ip="192.0.2.1")
    assert isinstance(attempt, Attempt) and len(throttle) == 2
    attempt.succeeded()
    attempt.failed()  # an attempt settles once
    assert len(throttle) == 0
    held = [throttle.reserve(account=f"spray{n}", client_ip=None) for n in range(500)]
    assert all(isinstance(attempt, Attempt) for attempt in held)
    assert len(throttle) <= POLICY.max_entries
