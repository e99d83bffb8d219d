"""The Coalescer: concurrent calls become batched calls, without a timer."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.batching import Coalescer, concatenating


class Recorder:
    """A flush that records its batches and can be held open."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.fail_on: int | None = None

    async def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        await self.release.wait()
        if self.fail_on is not None and self.fail_on in items:
            raise ValueError(f"bad item {self.fail_on}")
        return [i * 10 for i in items]


async def test_an_idle_coalescer_sends_at_once():
    flush = Recorder()
    coalescer = Coalescer(flush, max_items=8, max_in_flight=1)
    assert await asyncio.wait_for(coalescer.submit(3), 1) == 30
    assert flush.batches == [[3]]


async def test_calls_made_while_a_batch_runs_share_the_next_one():
    flush = Recorder()
    flush.release.clear()
    coalescer = Coalescer(flush, max_items=64, max_in_flight=1)
    first = asyncio.create_task(coalescer.submit(0))
    await asyncio.sleep(0.01)
    rest = [asyncio.create_task(coalescer.submit(i)) for i in range(1, 10)]
    await asyncio.sleep(0.01)
    assert flush.batches == [[0]]  # one in flight, nine waiting
    flush.release.set()
    assert await first == 0
    assert [await t for t in rest] == [i * 10 for i in range(1, 10)]
    assert flush.batches == [[0], list(range(1, 10))]


async def test_same_turn_calls_share_a_batch_and_max_items_caps_it():
    flush = Recorder()
    coalescer = Coalescer(flush, max_items=4, max_in_flight=3)
    results = await asyncio.gather(*(coalescer.submit(i) for i in range(10)))
    assert results == [i * 10 for i in range(10)]
    assert flush.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


async def test_a_failed_batch_fails_its_callers_only():
    flush = Recorder()
    flush.release.clear()
    flush.fail_on = 1
    coalescer = Coalescer(flush, max_items=2, max_in_flight=2)
    tasks = [asyncio.create_task(coalescer.submit(i)) for i in range(4)]
    await asyncio.sleep(0.01)
    flush.release.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert [type(o).__name__ for o in outcomes[:2]] == ["ValueError", "ValueError"]
    assert outcomes[2:] == [20, 30]


async def test_a_caller_cancelled_before_its_batch_is_left_out():
    flush = Recorder()
    flush.release.clear()
    coalescer = Coalescer(flush, max_items=64, max_in_flight=1)
    first = asyncio.create_task(coalescer.submit(0))
    await asyncio.sleep(0.01)
    gone = asyncio.create_task(coalescer.submit(1))
    kept = asyncio.create_task(coalescer.submit(2))
    await asyncio.sleep(0.01)
    gone.cancel()
    flush.release.set()
    assert (await first, await kept) == (0, 20)
    assert flush.batches == [[0], [2]]


async def test_a_flush_returning_the_wrong_count_is_an_error():
    async def short(items: list[int]) -> list[int]:
        return items[:-1]

    coalescer = Coalescer(short)
    outcomes = await asyncio.gather(
        *(coalescer.submit(i) for i in range(3)), return_exceptions=True
    )
    assert all(isinstance(o, RuntimeError) for o in outcomes)
    with pytest.raises(RuntimeError, match="2 results for 3 items"):
        raise outcomes[0]


async def test_concatenating_cuts_outputs_back_per_caller():
    calls: list[list[str]] = []

    async def upper(texts: list[str]) -> list[str]:
        calls.append(texts)
        return [t.upper() for t in texts]

    coalescer = Coalescer(concatenating(upper), max_items=8)
    results = await asyncio.gather(
        coalescer.submit(["a", "b"]), coalescer.submit([]), coalescer.submit(["c"])
    )
    assert [list(r) for r in results] == [["A", "B"], [], ["C"]]
    assert calls == [["a", "b", "c"]]
