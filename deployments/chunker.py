"""The chunker deployment (CPU): loads the tokenizer and spaCy once per replica."""

from __future__ import annotations

from ray import serve

from deployments.options import ConfiguredDeployment
from deployments.replica_logging import configure_replica_logging
from deployments.settings import ServiceConfig
from deployments.tokenizer_threads import tokenize_on_reserved_cpus
from serve_app.pipelines.components import build_chunker
from serve_app.schemas import Chunk, Document


@serve.deployment(name="chunker")
class ChunkerDeployment(ConfiguredDeployment):
    settings_name = "chunker"

    def __init__(self, config: ServiceConfig) -> None:
        configure_replica_logging()
        self.config = config
        tokenize_on_reserved_cpus(config.serve.chunker.num_cpus)
        # Semantic IMRaD splitting embeds sentences: the chunker then loads the dense model too.
        dense = None
        if self.config.chunker.semantic_split:
            from serve_app.encoders.base import DENSE_BACKENDS

            dense = DENSE_BACKENDS.create(self.config.dense.backend, self.config.dense)
        self.chunker = build_chunker(self.config, dense)

    def fingerprint(self) -> dict:
        return self.chunker.fingerprint()

    def ping(self) -> str:
        return "ok"

    async def chunk_many(self, documents: list[Document]) -> list[list[Chunk]]:
        return await self.chunker.chunk_many(documents)
