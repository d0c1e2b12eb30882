"""argon2id hashing: right answers, and the event loop keeps running while a hash is computed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Literal

import pytest
from argon2 import PasswordHasher

from service.identity.oidc.identities import UNUSABLE_PASSWORD_HASH
from service.identity.passwords import PasswordHashing
from service.identity.service import DISABLED_PASSWORD_HASH
from service.settings import Settings
from tests.support.service import cheap_password_hashing


async def _loop_turns_during(work: Awaitable[object]) -> int:
    """How many times another task ran on the event loop while `work` was awaited."""
    turns = 0
    running = True

    async def other_task() -> None:
        nonlocal turns
        while running:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_task())
    await asyncio.sleep(0)
    before = turns
    await work
    during = turns - before
    running = False
    await other
    return during


async def test_a_password_matches_its_hash_only() -> None:
    passwords = cheap_password_hashing()
    stored = await passwords.hash("correct horse battery")

    assert stored.startswith("$argon2id$")
    assert await passwords.verify(stored, "correct horse battery")
    assert not await passwords.verify(stored, "correct horse battery!")
    assert not await passwords.verify(None, "correct horse battery")  # unknown user
    assert not await passwords.verify("not-a-hash", "correct horse battery")


async def test_the_production_cost_runs_beside_the_event_loop() -> None:
    # The defaults (RFC 9106 low-memory: 3 passes over 64 MiB) take tens of milliseconds; on the
    # event loop's thread no other task could run meanwhile.
    passwords = PasswordHashing.from_settings(Settings(_env_file=None).password_hashing)

    turns_hashing = await _loop_turns_during(passwords.hash("correct horse battery"))
    stored = await passwords.hash("correct horse battery")
    turns_verifying = await _loop_turns_during(passwords.verify(stored, "correct horse battery"))

    assert "m=65536,t=3,p=4" in stored
    assert turns_hashing > 100
    assert turns_verifying > 100


async def test_a_hash_made_with_other_parameters_needs_redoing() -> None:
    old = await cheap_password_hashing().hash("correct horse battery")
    stronger = PasswordHashing(time_cost=2, memory_kib=128, parallelism=1, concurrency=1)

    assert stronger.needs_rehash(old)
    assert not stronger.needs_rehash(await stronger.hash("correct horse battery"))
    assert stronger.needs_rehash("not-a-hash")


@pytest.mark.parametrize("marker", [DISABLED_PASSWORD_HASH, UNUSABLE_PASSWORD_HASH, None])
async def test_an_account_no_password_matches_costs_a_full_check(
    marker: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    verify = PasswordHasher.verify

    def counting(hasher: PasswordHasher, password_hash: str | bytes, password: str | bytes) -> Literal[True]:
        checked.append(str(password_hash))
        return verify(hasher, password_hash, password)

    monkeypatch.setattr(PasswordHasher, "verify", counting)
    assert not await cheap_password_hashing().verify(marker, "any password")
    assert len(checked) == 1 and checked[0].startswith("$argon2id$"), "timed like a wrong password"
