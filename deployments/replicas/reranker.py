"""The cross-encoder reranker deployment: (query, passages) requests share pair batches."""

from __future__ import annotations

import asyncio

from ray import serve

from deployments.replicas.base import ModelReplica
from serve_app.encoders.base import RERANKER_BACKENDS, ServedReranker
from serve_app.errors import ConfigError
from serve_app.model_info import ModelInfo
from serve_app.model_manifest import loaded_revision


@serve.deployment(name="reranker")
class RerankerDeployment(ModelReplica[ServedReranker]):
    settings_name = "reranker"

    def load(self) -> ServedReranker:
        section = self.config.reranker  # a model cache at another commit: refused before loading
        loaded_revision(section.model, section.revision, "reranker.revision")
        reranker = RERANKER_BACKENDS.create(section.backend, section)
        if not isinstance(reranker, ServedReranker):
            raise ConfigError(f"reranker.backend {section.backend!r} cannot be served")
        return reranker

    def info(self) -> ModelInfo:
        return ModelInfo(model_id=self.model.model_id)

    async def score_many(
        self, requests: list[tuple[str, list[str]]]
    ) -> list[tuple[list[float], dict]]:
        """Scores for each (query, passages) request; their pairs share the model's batches."""
        return list(await asyncio.gather(*(self.model.score_with_stats(q, p) for q, p in requests)))
