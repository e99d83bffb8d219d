"""The GPU LLM: vLLM's asynchronous engine (``AsyncLLM``) inside the replica.

The chat template is the model's own (its tokenizer's ``apply_chat_template``), so the
prompt is the one the model was tuned on; tokens stream out as deltas
(``RequestOutputKind.DELTA``); a JSON schema becomes vLLM's structured outputs (guided
decoding), the same schema the llama.cpp backend compiles into a grammar. Closing a stream
aborts the request in the engine, which frees its KV blocks at the next step.

Fail fast: a ``cuda`` device without a GPU, or a vLLM build for another platform, is a
ConfigError at start naming ``llm.device`` (``serve_app.encoders.vllm_runtime``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from serve_app.config import LlmConfig, resolve_model_path
from serve_app.encoders.vllm_runtime import check_vllm_device, set_cpu_kv_cache
from serve_app.errors import ServiceUnavailableError
from serve_app.generation.base import (
    Completion,
    GenerationParams,
    Message,
    Usage,
)
from serve_app.generation.limits import GenerationSlots
from serve_app.generation.special_tokens import SpecialTokenGuard

log = logging.getLogger(__name__)


def sampling_params(params: GenerationParams, seed: int) -> Any:
    """vLLM's ``SamplingParams`` for ``params``: deltas, and the schema as structured output
    (``StructuredOutputsParams``; ``GuidedDecodingParams`` on releases before it)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    kwargs: dict[str, Any] = {
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        **params.sampling_options(),
        "seed": params.seed if params.seed is not None else seed,
        "output_kind": RequestOutputKind.DELTA,
    }
    if params.json_schema is not None:
        try:
            from vllm.sampling_params import StructuredOutputsParams

            kwargs["structured_outputs"] = StructuredOutputsParams(json=params.json_schema)
        except ImportError:
            from vllm.sampling_params import GuidedDecodingParams

            kwargs["guided_decoding"] = GuidedDecodingParams(json=params.json_schema)
    return SamplingParams(**kwargs)


class VllmStream:
    def __init__(self, owner: VllmLLM, prompt_ids: list[int], sampling: Any) -> None:
        self.owner = owner
        self.request_id = f"answer-{uuid.uuid4().hex}"
        self.usage = Usage()
        self.finish_reason: str | None = None
        self.prompt_token_ids: list[int] = []  # as the engine read them, once it ends
        # The ids themselves (a TokensPrompt), not the templated text: vLLM would encode the
        # text again with the tokenizer's own special tokens, a second BOS where the
        # template writes one, and the count the budget checked would not be the prompt's.
        prompt = {"prompt_token_ids": prompt_ids}
        self._outputs = owner.engine.generate(prompt, sampling, self.request_id)
        self._open = True

    async def __aiter__(self) -> AsyncIterator[str]:
        try:
            async for output in self._outputs:
                delta = output.outputs[0]
                self.usage.completion_tokens += len(delta.token_ids)
                self.owner.tokens_generated += len(delta.token_ids)
                if delta.text:
                    yield delta.text
                if output.finished:
                    self.finish_reason = delta.finish_reason or "stop"
                    self.prompt_token_ids = list(output.prompt_token_ids or ())
                    self.usage.prompt_tokens = len(self.prompt_token_ids)
        finally:
            await self._finish()

    async def _finish(self) -> None:
        if self._open:
            self._open = False
            self.owner.slots.release()

    async def aclose(self) -> None:
        if self._open:
            self.owner.streams_stopped += 1
            await self.owner.engine.abort(self.request_id)
            await self._outputs.aclose()
        await self._finish()


class VllmLLM:
    """``llm.backend: vllm``; ``llm.model`` is a model folder (the model-fetch Job's) or id."""

    def __init__(self, config: LlmConfig) -> None:
        platform = check_vllm_device(config.device, "llm.device")
        set_cpu_kv_cache(config.vllm, platform)
        from transformers import AutoTokenizer
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.config = config
        self.model_id = config.model
        path = resolve_model_path(config.model, config.revision)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        # Every added token: the tokenizer matches each one's text, special or not.
        self.guard = SpecialTokenGuard(
            [*self.tokenizer.all_special_tokens, *self.tokenizer.get_added_vocab()]
        )
        engine = config.vllm
        args: dict[str, Any] = {
            "model": path,
            "tokenizer": path,
            "dtype": config.dtype,
            "max_model_len": engine.max_model_len or config.context_tokens,
            "max_num_seqs": config.parallel,
            "gpu_memory_utilization": engine.gpu_memory_utilization,
            "tensor_parallel_size": engine.tensor_parallel_size,
            "enforce_eager": engine.enforce_eager,
            "seed": config.seed,
            # Compact JSON: the schema's grammar admits no whitespace between tokens, so the
            # output is as short as the schema allows and a model cannot pad it until
            # max_tokens cuts it (a tiny random Qwen3 wrote tabs to the end; the backends read
            # this engine setting, not the request's).
            "structured_outputs_config": StructuredOutputsConfig(
                backend="xgrammar", disable_any_whitespace=True
            ),
        }
        if engine.hf_overrides:
            args["hf_overrides"] = dict(engine.hf_overrides)
        log.info("starting vLLM's async engine for %s (%s)", path, config.dtype)
        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
        self.slots = GenerationSlots(config.parallel, config.max_queued, config.retry_after_s)
        self.tokens_generated = 0  # every token handed to a reader, over the engine's life
        self.streams_stopped = 0  # generations their reader closed while they still ran

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """The token ids vLLM's engine reads: the model's chat template applied and
        tokenized by it (its special tokens parsed, no more added), every message's
        special-token strings made plain text first."""
        templated = self.tokenizer.apply_chat_template(
            [m.as_dict() for m in self.guard.messages(messages)],
            tokenize=True,
            add_generation_prompt=True,
            return_dict=True,  # the same shape on transformers 4 and 5
        )
        return list(templated["input_ids"])

    async def count_tokens(self, texts: list[str]) -> list[int]:
        guarded = [self.guard.neutralise(text) for text in texts]
        return [len(ids) for ids in self.tokenizer(guarded, add_special_tokens=False).input_ids]

    async def as_read(self, texts: list[str]) -> list[str]:
        return [self.guard.neutralise(text) for text in texts]

    async def count_prompt_tokens(self, messages: list[Message]) -> int:
        return len(self.prompt_ids(messages))

    async def open_stream(self, messages: list[Message], params: GenerationParams) -> VllmStream:
        await self.slots.acquire()
        try:
            return VllmStream(
                self, self.prompt_ids(messages), sampling_params(params, self.config.seed)
            )
        except BaseException:
            self.slots.release()
            raise

    async def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        stream = await self.open_stream(messages, params)
        try:
            text = "".join([delta async for delta in stream])
        finally:
            await stream.aclose()
        return Completion(text, stream.finish_reason or "stop", stream.usage)

    def stats(self) -> dict[str, int]:
        return {
            **self.slots.stats(),
            "tokens_generated": self.tokens_generated,
            "streams_stopped": self.streams_stopped,
        }

    async def check_health(self) -> None:
        """Raises ServiceUnavailableError once vLLM's engine is dead or shut down (Ray Serve's
        health check of the LLM deployment, which then replaces the replica)."""
        if self.engine.errored or not self.engine.is_running:
            raise ServiceUnavailableError("the vLLM engine is dead")
        await self.engine.check_health()

    def close(self) -> None:
        self.engine.shutdown()
