"""The vllm LLM backend (vLLM's AsyncLLM on CPU, float32) on a tiny random Qwen3 causal LM
with the real Qwen3 tokenizer and chat template: the mechanics (deltas, greedy completion and
stream agreeing, schema-constrained output parsing, a closed stream aborted and its slot
freed, admission). Random weights write nonsense; the structure around it is what is tested."""

import json

import jsonschema
import pytest

from serve_app.config import LlmConfig
from serve_app.errors import OverloadedError
from serve_app.generation import GenerationParams, Message
from tests.conftest import QWEN3_TOKENIZER, require_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]
require_vllm()

SCHEMA = {
    "type": "object",
    "properties": {
        "is_relevant": {"type": "boolean"},
        "semantic_query": {"type": "string", "maxLength": 20},
    },
    "required": ["is_relevant", "semantic_query"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def tiny_qwen3_lm(tmp_path_factory):
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(QWEN3_TOKENIZER))
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
        tie_word_embeddings=True,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("tiny-qwen3-lm")
    Qwen3ForCausalLM(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def vllm_llm(tiny_qwen3_lm):
    from serve_app.generation.vllm_engine import VllmLLM

    llm = VllmLLM(
        LlmConfig(
            enabled=True, backend="vllm", model=str(tiny_qwen3_lm), dtype="float32",
            context_tokens=1024, parallel=1, max_queued=0, temperature=0.0,
            vllm={"enforce_eager": True, "max_model_len": 1024},
        )
    )  # fmt: skip
    yield llm
    llm.close()


MESSAGES = [Message("system", "Be brief."), Message("user", "Name a colour.")]


async def test_greedy_completion_and_stream_agree(vllm_llm):
    params = GenerationParams(max_tokens=12, temperature=0.0)
    before = vllm_llm.stats()
    whole = await vllm_llm.complete(MESSAGES, params)
    assert whole.usage.completion_tokens == 12 and whole.finish_reason == "length"
    assert whole.usage.prompt_tokens > 5
    stream = await vllm_llm.open_stream(MESSAGES, params)
    deltas = [d async for d in stream]
    await stream.aclose()
    assert "".join(deltas) == whole.text
    assert vllm_llm.slots.active == 0
    after = vllm_llm.stats()  # both runs' tokens counted once; neither was stopped early
    assert after["tokens_generated"] - before["tokens_generated"] == 24
    assert after["streams_stopped"] == before["streams_stopped"]


async def test_structured_output_parses_against_the_schema(vllm_llm):
    answer = await vllm_llm.complete(
        MESSAGES, GenerationParams(max_tokens=64, temperature=0.0, json_schema=SCHEMA)
    )
    jsonschema.validate(json.loads(answer.text), SCHEMA)


async def test_a_closed_stream_frees_its_slot_and_a_full_replica_refuses(vllm_llm):
    stopped_before = vllm_llm.streams_stopped
    stream = await vllm_llm.open_stream(MESSAGES, GenerationParams(max_tokens=200))
    with pytest.raises(OverloadedError):
        await vllm_llm.open_stream(MESSAGES, GenerationParams(max_tokens=2))
    async for _ in stream:
        break
    await stream.aclose()
    assert vllm_llm.slots.active == 0
    assert vllm_llm.streams_stopped == stopped_before + 1
    assert (await vllm_llm.complete(MESSAGES, GenerationParams(max_tokens=2))).text is not None


async def test_untrusted_text_reaches_vllm_without_a_control_token(vllm_llm):
    """The ids vLLM's engine itself read (``prompt_token_ids``): only the chat template's
    own special tokens, none from the passage, title, section, history or question."""
    from tests.serve_app.generation.test_prompt_safety import hostile_messages

    messages = hostile_messages()
    stream = await vllm_llm.open_stream(messages, GenerationParams(max_tokens=2))
    try:
        _ = [delta async for delta in stream]
    finally:
        await stream.aclose()
    assert stream.prompt_token_ids == vllm_llm.prompt_ids(messages)
    tokenizer = vllm_llm.tokenizer
    added = set(tokenizer.get_added_vocab().values())
    found = [tokenizer.convert_ids_to_tokens(i) for i in stream.prompt_token_ids if i in added]
    assert found == ["<|im_start|>", "<|im_end|>"] * len(messages) + ["<|im_start|>"]


async def test_the_llm_deployment_is_unhealthy_once_its_engine_is_dead(tiny_qwen3_lm):
    """Ray Serve's health check of the LLM deployment asks the backend; a vLLM engine that
    died (shut down here) must fail it, so Serve replaces the replica."""
    import inspect
    from types import SimpleNamespace

    from deployments.replicas.llm import LlmDeployment
    from serve_app.generation.vllm_engine import VllmLLM

    llm = VllmLLM(
        LlmConfig(
            enabled=True, backend="vllm", model=str(tiny_qwen3_lm), dtype="float32",
            context_tokens=512, parallel=1, max_queued=0, temperature=0.0,
            vllm={"enforce_eager": True, "max_model_len": 512},
        )
    )  # fmt: skip
    replica = SimpleNamespace(model=llm)

    async def check() -> None:
        outcome = LlmDeployment.func_or_class.check_health(replica)
        if inspect.isawaitable(outcome):
            await outcome

    await check()  # alive: healthy
    llm.close()  # the engine is dead from here on
    with pytest.raises(Exception, match="engine"):
        await check()
