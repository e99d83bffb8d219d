"""The SPLADE deployment: like the dense one; queries and documents pruned differently."""

from __future__ import annotations

from typing import Any

from ray import serve

from deployments.options import ConfiguredDeployment
from deployments.replica_logging import configure_replica_logging
from deployments.settings import ServiceConfig
from deployments.tokenizer_threads import tokenize_on_reserved_cpus
from serve_app.encoders.queue import Lane
from serve_app.encoders.splade import SpladeEncoder
from serve_app.model_manifest import loaded_revision
from serve_app.schemas import SparseVector


@serve.deployment(name="splade")
class SpladeDeployment(ConfiguredDeployment):
    settings_name = "splade"

    def __init__(self, config: ServiceConfig) -> None:
        configure_replica_logging()
        self.config = config
        tokenize_on_reserved_cpus(config.serve.splade.num_cpus)
        splade = self.config.splade  # a model cache at another commit: refused before loading
        loaded_revision(splade.model, splade.revision, "splade.revision")
        self.encoder = SpladeEncoder(self.config.splade)

    def info(self) -> dict[str, Any]:
        return {"model_id": self.encoder.model_id}

    def ping(self) -> str:
        return "ok"

    async def encode(self, mode: Lane, texts: list[str]) -> tuple[list[SparseVector], dict]:
        return await self.encoder.encode_lane(mode, texts)

    def check_health(self) -> None:
        if self.encoder is None:
            raise RuntimeError("SPLADE model not loaded")

    def __del__(self) -> None:
        close = getattr(getattr(self, "encoder", None), "close", None)
        if close is not None:
            close()
