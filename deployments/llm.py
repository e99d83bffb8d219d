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

from deployments.options import ConfiguredDeployment
from deployments.replica_logging import configure_replica_logging
from deployments.settings import ServiceConfig
from serve_app.generation import GenerationParams, Message, build_llm
from serve_app.generation.base import Completion
from serve_app.model_manifest import loaded_revision

ADMITTED = {"admitted": True}


@serve.deployment(name="llm")
class LlmDeployment(ConfiguredDeployment):
    settings_name = "llm"

    def __init__(self, config: ServiceConfig) -> None:
        configure_replica_logging()
        self.config = config
        llm = self.config.llm  # a model cache at another commit: refused before loading
        loaded_revision(llm.model, llm.revision, "llm.revision")
        self.llm = build_llm(self.config.llm)

    def info(self) -> dict[str, Any]:
        return {
            "model_id": self.llm.model_id,
            "backend": self.config.llm.backend,
            "parallel": self.config.llm.parallel,
        }

    def ping(self) -> str:
        return "ok"

    def stats(self) -> dict[str, int]:
        return self.llm.stats()  # type: ignore[attr-defined]

    async def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        return await self.llm.complete(messages, params)

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return await self.llm.count_tokens(texts)

    async def count_prompt_tokens(self, messages: list[Message]) -> int:
        return await self.llm.count_prompt_tokens(messages)

    async def stream(
        self, messages: list[Message], params: GenerationParams
    ) -> AsyncIterator[dict[str, Any]]:
        stream = await self.llm.open_stream(messages, params)
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

    async def check_health(self) -> None:
        await self.llm.check_health()  # type: ignore[attr-defined]

    def __del__(self) -> None:
        close = getattr(getattr(self, "llm", None), "close", None)
        if close is not None:
            close()
