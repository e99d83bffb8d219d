"""The LLM deployment: one model per replica (llama.cpp on CPUs, vLLM on a GPU), with its
own replicas, resources and autoscaling (``serve.llm``).

Each replica admits at most ``llm.parallel`` generations and lets ``llm.max_queued`` wait
(OverloadedError past that: a 429 at the ingress). A streamed generation is an async
generator: its first item says the request was admitted, the next ones are text deltas, the
last one carries the usage. When the caller cancels it (the client went away), the
generator is closed here, which stops the generation in the engine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ray import serve

from deployments.replicas.base import ModelReplica
from serve_app.errors import ConfigError
from serve_app.generation import GenerationParams, Message, build_llm
from serve_app.generation.base import Completion, ServedLLM
from serve_app.model_info import LLMInfo
from serve_app.model_manifest import loaded_revision

ADMITTED = {"admitted": True}


@serve.deployment(name="llm")
class LlmDeployment(ModelReplica[ServedLLM]):
    settings_name = "llm"
    tokenizes = False  # the engine sizes its own threads

    def load(self) -> ServedLLM:
        llm = self.config.llm  # a model cache at another commit: refused before loading
        loaded_revision(llm.model, llm.revision, "llm.revision")
        engine = build_llm(llm)
        if not isinstance(engine, ServedLLM):
            raise ConfigError(f"llm.backend {llm.backend!r} cannot be served")
        return engine

    def info(self) -> LLMInfo:
        return LLMInfo(
            model_id=self.model.model_id,
            backend=self.config.llm.backend,
            parallel=self.config.llm.parallel,
        )

    def stats(self) -> dict[str, int]:
        return self.model.stats()

    async def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        return await self.model.complete(messages, params)

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return await self.model.count_tokens(texts)

    async def count_prompt_tokens(self, messages: list[Message]) -> int:
        return await self.model.count_prompt_tokens(messages)

    async def as_read(self, texts: list[str]) -> list[str]:
        return await self.model.as_read(texts)

    async def stream(
        self, messages: list[Message], params: GenerationParams
    ) -> AsyncIterator[dict[str, Any]]:
        stream = await self.model.open_stream(messages, params)
        try:
            yield ADMITTED
            async for delta in stream:
                yield {"text": delta}
            yield {
                "finish_reason": stream.finish_reason,
                "prompt_tokens": stream.usage.prompt_tokens,
                "completion_tokens": stream.usage.completion_tokens,
            }
        finally:
            await stream.aclose()
