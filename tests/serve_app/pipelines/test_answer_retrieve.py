"""The answer's retrieval when its bound runs out: the sub-query searches are cancelled and
awaited, so nothing is left running and asyncio reports no failure nobody read
(``_GatheringFuture exception was never retrieved``). ``HangingSearch`` is the test double of
the search pipeline: a search that never ends (one stuck on a store) cannot be made real."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from serve_app.pipelines.answer import AnswerPipeline
from serve_app.schemas import AnswerRequest, ScopeKey

pytestmark = pytest.mark.asyncio


class HangingSearch:
    def __init__(self) -> None:
        self.running = 0

    async def search(self, *args: Any, **kwargs: Any) -> Any:
        self.running += 1
        try:
            await asyncio.sleep(3600)
        finally:
            self.running -= 1


async def _unretrieved(run: Any) -> list[str]:
    """The messages of the loop's exception handler while ``run`` runs and is collected."""
    loop = asyncio.get_running_loop()
    seen: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: seen.append(context["message"]))
    try:
        await run()
        gc.collect()
        await asyncio.sleep(0)
        gc.collect()
    finally:
        loop.set_exception_handler(previous)
    return seen


@pytest.fixture
def pipeline(local_config) -> tuple[AnswerPipeline, HangingSearch]:
    search = HangingSearch()
    return AnswerPipeline(local_config, None, search, None), search  # type: ignore[arg-type]


def _retrieve(pipeline: AnswerPipeline, timeout_s: float):
    request = AnswerRequest(question="sleep?")
    key = ScopeKey("default", "default")
    return pipeline._retrieve(request, key, ["sleep?", "naps?"], None, 3, timeout_s)


async def test_a_retrieve_past_its_deadline_leaves_nothing_behind(pipeline):
    answers, search = pipeline

    async def run() -> None:
        with pytest.raises(TimeoutError):
            await _retrieve(answers, 0.05)

    assert await _unretrieved(run) == []
    assert search.running == 0


async def test_a_retrieve_cancelled_by_the_answers_bound_leaves_nothing_behind(pipeline):
    answers, search = pipeline

    async def run() -> None:
        with pytest.raises(TimeoutError):  # the bound around the whole answer
            await asyncio.wait_for(_retrieve(answers, 60), 0.05)

    assert await _unretrieved(run) == []
    assert search.running == 0
