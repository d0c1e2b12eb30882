"""GroupCommit: who shares a batch, who waits for whom, and whose failure reaches whom."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from service.db.group_commit import GroupCommit


class Recorder:
    """A batch runner that records its batches and can be held at the start of each."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.started = asyncio.Event()

    async def __call__(self, batch: Sequence[str]) -> list[str | Exception]:
        self.batches.append(list(batch))
        self.started.set()
        await self.release.wait()
        return [ValueError(item) if item.startswith("bad") else item.upper() for item in batch]


async def test_a_lone_item_goes_at_once_in_a_batch_of_its_own() -> None:
    runner = Recorder()
    commits = GroupCommit(runner, max_wait=60)
    assert await asyncio.wait_for(commits.submit("a"), 5) == "A"
    assert runner.batches == [["a"]]


async def test_items_submitted_while_a_batch_runs_share_the_next_one() -> None:
    runner = Recorder()
    runner.release.clear()
    commits = GroupCommit(runner)
    first = asyncio.create_task(commits.submit("a"))
    await runner.started.wait()
    rest = [asyncio.create_task(commits.submit(item)) for item in ("b", "c", "d")]
    await asyncio.sleep(0)  # let them queue behind the running batch
    runner.release.set()
    assert await first == "A"
    assert [await task for task in rest] == ["B", "C", "D"]
    assert runner.batches == [["a"], ["b", "c", "d"]]


async def test_batches_are_capped() -> None:
    runner = Recorder()
    runner.release.clear()
    commits = GroupCommit(runner, max_batch=2)
    tasks = [asyncio.create_task(commits.submit(item)) for item in "abcde"]
    await runner.started.wait()
    runner.release.set()
    assert [await task for task in tasks] == list("ABCDE")
    assert runner.batches == [["a", "b"], ["c", "d"], ["e"]]


async def test_a_failed_item_fails_only_its_own_submitter() -> None:
    runner = Recorder()
    runner.release.clear()
    commits = GroupCommit(runner)
    tasks = [asyncio.create_task(commits.submit(item)) for item in ("a", "bad", "c")]
    await runner.started.wait()
    runner.release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[0] == "A" and results[2] == "C"
    assert isinstance(results[1], ValueError)


async def test_a_runner_that_raises_fails_its_whole_batch_and_the_next_batch_still_runs() -> None:
    calls = 0

    async def explodes_once(batch: Sequence[str]) -> list[str | Exception]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("database gone")
        return [item.upper() for item in batch]

    commits: GroupCommit[str, str] = GroupCommit(explodes_once)
    with pytest.raises(RuntimeError, match="database gone"):
        await commits.submit("a")
    assert await commits.submit("b") == "B"


async def test_a_submitter_that_gives_up_does_not_disturb_its_batch() -> None:
    runner = Recorder()
    runner.release.clear()
    commits = GroupCommit(runner)
    first = asyncio.create_task(commits.submit("a"))
    await runner.started.wait()
    quitter = asyncio.create_task(commits.submit("b"))
    stayer = asyncio.create_task(commits.submit("c"))
    await asyncio.sleep(0)
    quitter.cancel()
    runner.release.set()
    assert await first == "A"
    assert await stayer == "C"
    assert runner.batches == [["a"], ["b", "c"]]  # the quitter's item was still committed


async def test_a_batch_waits_for_an_item_on_its_way() -> None:
    runner = Recorder()
    commits = GroupCommit(runner, max_wait=60)
    preparing = asyncio.Event()
    prepared = asyncio.Event()

    async def slow_submitter() -> str:
        with commits.coming():
            preparing.set()
            await prepared.wait()
        return await commits.submit("late")

    late = asyncio.create_task(slow_submitter())
    await preparing.wait()
    early = asyncio.create_task(commits.submit("early"))
    await asyncio.sleep(0)
    assert runner.batches == []  # held for the item being prepared
    prepared.set()
    assert (await early, await late) == ("EARLY", "LATE")
    assert runner.batches == [["early", "late"]]


async def test_waiting_for_company_is_bounded() -> None:
    runner = Recorder()
    commits = GroupCommit(runner, max_wait=0.01)
    never = asyncio.Event()

    async def stuck_preparation() -> None:
        with commits.coming():
            await never.wait()

    stuck = asyncio.create_task(stuck_preparation())
    await asyncio.sleep(0)
    assert await asyncio.wait_for(commits.submit("alone"), 5) == "ALONE"
    stuck.cancel()
