"""Background jobs: `Pace`, a token bucket driven here by a clock the test moves, and `every`."""

from __future__ import annotations

import asyncio

from service.periodic import Pace, every


class FakeTime:
    """A clock that only moves when the code under test sleeps, recording each sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


async def test_one_seconds_worth_runs_at_once_then_the_rate_holds() -> None:
    time = FakeTime()
    pace = Pace(5, clock=time.clock, sleep=time.sleep)
    for _ in range(5):
        await pace.step()
    assert time.sleeps == [], "a burst of one second's worth does not wait"
    for _ in range(10):
        await pace.step()
    assert len(time.sleeps) == 10
    assert all(abs(seconds - 0.2) < 1e-9 for seconds in time.sleeps)
    assert abs(time.now - 1002.0) < 1e-9, "15 steps at 5 a second: 2 seconds after the first 5"


async def test_idle_time_refills_up_to_the_burst_only() -> None:
    time = FakeTime()
    pace = Pace(2, clock=time.clock, sleep=time.sleep)
    for _ in range(2):
        await pace.step()
    time.now += 3600  # an hour idle earns one second's worth, not 7,200 steps
    for _ in range(2):
        await pace.step()
    assert time.sleeps == []
    await pace.step()
    assert time.sleeps == [0.5]


async def test_a_slow_rate_still_allows_one_step_at_once() -> None:
    time = FakeTime()
    pace = Pace(0.5, clock=time.clock, sleep=time.sleep)
    await pace.step()
    assert time.sleeps == []
    await pace.step()
    assert time.sleeps == [2.0]


async def test_zero_means_unpaced() -> None:
    time = FakeTime()
    pace = Pace(0, clock=time.clock, sleep=time.sleep)
    for _ in range(1000):
        await pace.step()
    assert time.sleeps == []


async def test_every_keeps_running_a_jittered_job() -> None:
    runs = 0
    third = asyncio.Event()

    async def job() -> None:
        nonlocal runs
        runs += 1
        if runs == 3:
            third.set()

    async with every(0.001, job, name="test-job", jitter=1.0):  # waits anywhere in 0..2 ms
        async with asyncio.timeout(5):
            await third.wait()
    assert runs >= 3
