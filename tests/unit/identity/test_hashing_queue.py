"""Password hashing refuses at once, rather than queueing, once its slots and queue are full."""

from __future__ import annotations

import asyncio

import pytest

from service.identity.passwords import HashingBusy, PasswordHashing


async def test_calls_beyond_slots_and_queue_are_refused() -> None:
    hashing = PasswordHashing(time_cost=1, memory_kib=64, parallelism=1, concurrency=1, queue=1)
    # gather starts the coroutines in order: two are admitted (one slot, one queued) before any ends.
    results = await asyncio.gather(
        *(hashing.hash("a long password") for _ in range(4)), return_exceptions=True
    )
    assert [type(result) for result in results[2:]] == [HashingBusy, HashingBusy]
    assert all(isinstance(result, str) for result in results[:2])
    assert hashing.in_flight == 0
    assert await hashing.verify(str(results[0]), "a long password")


def test_the_settings_bound_the_queue() -> None:
    from service.settings import Settings

    with pytest.raises(ValueError, match="password_hash_queue"):
        Settings(_env_file=None, password_hash_queue=-1)  # type: ignore[call-arg]
