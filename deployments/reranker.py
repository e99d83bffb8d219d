"""The cross-encoder reranker deployment: (query, passages) requests share pair batches."""

from __future__ import annotations

import asyncio
from typing import Any

from ray import serve

from deployments.options import ConfiguredDeployment
from deployments.replica_logging import configure_replica_logging
from deployments.settings import ServiceConfig
from deployments.tokenizer_threads import tokenize_on_reserved_cpus
from serve_app.encoders.base import RERANKER_BACKENDS, ServedReranker
from serve_app.errors import ConfigError
from serve_app.model_manifest import loaded_revision


@serve.deployment(name="reranker")
class RerankerDeployment(ConfiguredDeployment):
    settings_name = "reranker"

    def __init__(self, config: ServiceConfig) -> None:
        configure_replica_logging()
        self.config = config
        tokenize_on_reserved_cpus(config.serve.reranker.num_cpus)
        section = self.config.reranker  # a model cache at another commit: refused before loading
        loaded_revision(section.model, section.revision, "reranker.revision")
        reranker = RERANKER_BACKENDS.create(self.config.reranker.backend, self.config.reranker)
        if not isinstance(reranker, ServedReranker):
            raise ConfigError(f"reranker.backend {self.config.reranker.backend!r} cannot be served")
        self.reranker: ServedReranker = reranker

    def info(self) -> dict[str, Any]:
        return {"model_id": self.reranker.model_id}

    def ping(self) -> str:
        return "ok"

    async def score_many(
        self, requests: list[tuple[str, list[str]]]
    ) -> list[tuple[list[float], dict]]:
        """Scores for each (query, passages) request; their pairs share the model's batches."""
        return list(
            await asyncio.gather(*(self.reranker.score_with_stats(q, p) for q, p in requests))
        )

    def check_health(self) -> None:
        if self.reranker is None:
            raise RuntimeError("reranker not loaded")

    def __del__(self) -> None:
        # The queue's worker thread and, for vLLM, the engine process stop with the replica.
        close = getattr(getattr(self, "reranker", None), "close", None)
        if close is not None:
            close()
