"""Admission on the llama.cpp backend (SmolLM2-135M, real engine): a slot is held exactly as
long as llama.cpp works on its request, whatever way the caller leaves, and the count of held
slots always equals the engine's own count of requests it is processing."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from serve_app.config import LlmConfig
from serve_app.generation import GenerationParams, Message, build_llm
from tests.support.data import SMOLLM2

pytestmark = pytest.mark.asyncio(loop_scope="session")

STORY = [Message("user", "Write a long story about a lighthouse keeper and his cat.")]
# About 3,000 prompt tokens: SmolLM2 reads them in several seconds on one busy core.
LONG_PROMPT = [Message("user", "The quick brown fox jumps over the lazy dog. " * 300 + "Why?")]


@pytest.fixture
def single_slot():
    llm = build_llm(LlmConfig(**{**SMOLLM2, "parallel": 1, "max_queued": 4}))
    yield llm
    llm.close()


async def settled(llm) -> tuple[int, int]:
    """(slots held, requests the engine processes), read together."""
    return llm.slots.active, await llm.engine_requests()


async def test_a_timed_out_completion_keeps_its_slot_until_the_engine_lets_go(single_slot):
    llm = single_slot
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(llm.complete(STORY, GenerationParams(max_tokens=400)), 0.3)
    active, engine = await settled(llm)
    assert active == engine, f"{active} slots held while llama.cpp processes {engine}"
    assert (active, engine) == (0, 0), "a timed-out call is stopped, not left running"


async def test_a_caller_who_leaves_during_a_long_prompt_frees_the_slot_within_a_second(
    single_slot,
):
    llm = single_slot
    stream = await llm.open_stream(LONG_PROMPT, GenerationParams(max_tokens=8))
    await asyncio.sleep(0.5)  # llama.cpp is reading the prompt: no token yet
    assert await llm.engine_requests() == 1
    began = time.perf_counter()
    await stream.aclose()
    assert time.perf_counter() - began < 1.0
    assert await settled(llm) == (0, 0)


async def test_prompt_tokens_count_the_whole_prompt_also_when_cached(single_slot):
    llm = single_slot
    params = GenerationParams(max_tokens=4, temperature=0.0)
    messages = [Message("user", "Name three colours.")]
    whole = await llm.complete(messages, params)
    counts = []
    for _ in range(2):  # the second read comes from llama.cpp's prompt cache
        stream = await llm.open_stream(messages, params)
        try:
            _ = [d async for d in stream]
        finally:
            await stream.aclose()
        counts.append(stream.usage.prompt_tokens)
    assert counts == [whole.usage.prompt_tokens] * 2


async def test_slots_return_to_zero_after_any_mix_of_ways_to_leave():
    """Property over a seeded random mix: completions, completions timed out, streams read to
    the end, closed early, closed during their prompt, and tasks cancelled while waiting or
    running. After each wave the held slots equal the engine's count; at the end both are 0."""
    llm = build_llm(LlmConfig(**{**SMOLLM2, "parallel": 2, "max_queued": 16}))
    rng = random.Random(45)

    async def complete(timeout: float | None) -> None:
        await asyncio.wait_for(llm.complete(STORY, GenerationParams(max_tokens=24)), timeout)

    async def stream(read: int | None, prompt: list[Message]) -> None:
        opened = await llm.open_stream(prompt, GenerationParams(max_tokens=24))
        try:
            if prompt is LONG_PROMPT:  # left while llama.cpp still reads the prompt
                await asyncio.sleep(rng.uniform(0.05, 0.3))
                return
            seen = 0
            async for _ in opened:
                seen += 1
                if read is not None and seen >= read:
                    break
        finally:
            await opened.aclose()

    def one() -> asyncio.Task:
        kind = rng.choice(["complete", "timeout", "read", "close", "prompt"])
        work = {
            "complete": lambda: complete(None),
            "timeout": lambda: complete(rng.uniform(0.01, 0.4)),
            "read": lambda: stream(None, STORY),
            "close": lambda: stream(rng.randint(1, 4), STORY),
            "prompt": lambda: stream(None, LONG_PROMPT),
        }[kind]()
        return asyncio.create_task(work)

    try:
        for _ in range(3):
            tasks = [one() for _ in range(6)]
            await asyncio.sleep(rng.uniform(0.05, 0.6))
            for task in rng.sample(tasks, 2):
                task.cancel()  # a caller cancelled while waiting, reading its prompt or writing
            await asyncio.gather(*tasks, return_exceptions=True)
            active, engine = await settled(llm)
            assert active == engine == 0, (active, engine)
            assert llm.slots.waiting == 0
    finally:
        llm.close()


async def test_the_health_check_asks_the_engine_loop_itself(single_slot, monkeypatch):
    """Healthy while a generation runs (the engine's loop answers between steps); an engine
    whose loop does not answer is unhealthy (main only read a ``closed`` flag, so a wedged
    engine stayed healthy for Serve). The wedge is a metrics call that never returns."""
    from serve_app.errors import ServiceUnavailableError
    from serve_app.generation import llama_cpp

    stream = await single_slot.open_stream(STORY, GenerationParams(max_tokens=200))
    try:
        await anext(aiter(stream))
        started = time.perf_counter()
        await single_slot.check_health()
        assert time.perf_counter() - started < 2
    finally:
        await stream.aclose()
    release = asyncio.Event()
    loop = asyncio.get_running_loop()

    class Wedged:
        def handle_metrics(self) -> str:
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
            return ""

    monkeypatch.setattr(llama_cpp, "HEALTH_TIMEOUT_S", 0.3)
    monkeypatch.setattr(single_slot, "server", Wedged())
    with pytest.raises(ServiceUnavailableError, match="did not answer"):
        await single_slot.check_health()
    release.set()
