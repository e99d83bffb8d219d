"""The llama.cpp backend on a real GGUF (SmolLM2-135M): completion, streaming, JSON-schema
output, stopping a stream and admission."""

import asyncio
import json

import jsonschema
import pytest

from serve_app.config import LlmConfig
from serve_app.errors import OverloadedError
from serve_app.generation import GenerationParams, Message, build_llm
from tests.support.data import SMOLLM2

pytestmark = pytest.mark.asyncio(loop_scope="session")

STORY = [Message("user", "Write a long story about a lighthouse keeper and his cat.")]


async def test_completion_and_stream_write_the_same_greedy_text(smollm2):
    params = GenerationParams(max_tokens=24, temperature=0.0, seed=1)
    messages = [Message("user", "Name three colours.")]
    whole = await smollm2.complete(messages, params)
    assert whole.text and whole.usage.completion_tokens <= 24
    assert whole.usage.prompt_tokens > 5
    stream = await smollm2.open_stream(messages, params)
    try:
        deltas = [d async for d in stream]
    finally:
        await stream.aclose()
    assert len(deltas) > 3
    assert "".join(deltas) == whole.text
    assert stream.finish_reason in {"stop", "length"}
    assert stream.usage.completion_tokens == whole.usage.completion_tokens


SCHEMA = {
    "type": "object",
    "properties": {
        "is_relevant": {"type": "boolean"},
        "semantic_query": {"type": "string", "maxLength": 80},
        "years": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
    },
    "required": ["is_relevant", "semantic_query", "years"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "question",
    ["Does aspirin prevent strokes?", "tell me a joke", "Papers from 2019 on malaria vaccines"],
)
async def test_json_schema_output_always_parses_against_the_schema(smollm2, question):
    answer = await smollm2.complete(
        [Message("user", f"Describe this question as JSON: {question}")],
        # The schema bounds the output (80 characters, 3 integers): room to finish it.
        GenerationParams(max_tokens=256, json_schema=SCHEMA),
    )
    assert answer.finish_reason == "stop"
    jsonschema.validate(json.loads(answer.text), SCHEMA)


async def test_closing_a_stream_stops_the_generation(smollm2):
    before = smollm2.tokens_generated
    stopped_before = smollm2.streams_stopped
    stream = await smollm2.open_stream(STORY, GenerationParams(max_tokens=400, temperature=0.7))
    seen = 0
    async for _ in stream:
        seen += 1
        if seen == 3:
            break
    await stream.aclose()
    stopped_at = smollm2.tokens_generated
    assert smollm2.slots.active == 0  # the slot is free as soon as aclose returns
    await asyncio.sleep(1.0)
    assert smollm2.tokens_generated == stopped_at  # nothing generated after the close
    assert stopped_at - before < 50  # far from the 400 it was allowed
    assert smollm2.streams_stopped == stopped_before + 1
    again = await smollm2.complete(STORY, GenerationParams(max_tokens=4))
    assert again.usage.completion_tokens == 4


async def test_a_full_replica_refuses_at_once_with_a_retry_hint():
    llm = build_llm(LlmConfig(**{**SMOLLM2, "parallel": 1, "max_queued": 0, "retry_after_s": 3}))
    try:
        running = await llm.open_stream(STORY, GenerationParams(max_tokens=200))
        with pytest.raises(OverloadedError) as refused:
            await llm.open_stream(STORY, GenerationParams(max_tokens=8))
        assert refused.value.status == 429 and refused.value.retry_after_s == 3
        assert "llm.parallel 1" in refused.value.message
        await running.aclose()
        assert (await llm.complete(STORY, GenerationParams(max_tokens=2))).text
    finally:
        llm.close()


async def test_queued_requests_wait_for_a_slot_and_a_cancelled_wait_leaves_no_trace():
    llm = build_llm(LlmConfig(**{**SMOLLM2, "parallel": 1, "max_queued": 1}))
    try:
        running = await llm.open_stream(STORY, GenerationParams(max_tokens=200))
        waiting = asyncio.create_task(llm.complete(STORY, GenerationParams(max_tokens=2)))
        await asyncio.sleep(0.2)
        assert llm.slots.stats() == {"active": 1, "waiting": 1, "parallel": 1}
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert llm.slots.waiting == 0
        await running.aclose()
        assert llm.slots.active == 0
    finally:
        llm.close()
