"""The SPLADE deployment: like the dense one; queries and documents pruned differently."""

from __future__ import annotations

from ray import serve

from deployments.replicas.base import ModelReplica
from serve_app.encoders.queue import Lane
from serve_app.encoders.splade import SpladeEncoder
from serve_app.model_info import ModelInfo
from serve_app.model_manifest import loaded_revision
from serve_app.schemas import SparseVector


@serve.deployment(name="splade")
class SpladeDeployment(ModelReplica[SpladeEncoder]):
    settings_name = "splade"

    def load(self) -> SpladeEncoder:
        splade = self.config.splade  # a model cache at another commit: refused before loading
        loaded_revision(splade.model, splade.revision, "splade.revision")
        return SpladeEncoder(splade)

    def info(self) -> ModelInfo:
        return ModelInfo(model_id=self.model.model_id)

    async def encode(self, mode: Lane, texts: list[str]) -> tuple[list[SparseVector], dict]:
        return await self.model.encode_lane(mode, texts)
