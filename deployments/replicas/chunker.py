"""The chunker deployment (CPU): loads the tokenizer and spaCy once per replica."""

from __future__ import annotations

from ray import serve

from deployments.replicas.base import Replica
from deployments.settings import ServiceConfig
from serve_app.pipelines.components import build_chunker
from serve_app.schemas import Chunk, Document


@serve.deployment(name="chunker")
class ChunkerDeployment(Replica):
    """No model of its own to lose (a tokenizer, spaCy): Serve's own check of the replica's
    process is its health check; with semantic IMRaD splitting it embeds in process."""

    settings_name = "chunker"

    def __init__(self, config: ServiceConfig) -> None:
        super().__init__(config)
        # Semantic IMRaD splitting embeds sentences: the chunker then loads the dense model too.
        dense = None
        if config.chunker.semantic_split:
            from serve_app.encoders.base import DENSE_BACKENDS

            dense = DENSE_BACKENDS.create(config.dense.backend, config.dense)
        self.chunker = build_chunker(config, dense)

    def fingerprint(self) -> dict:
        return self.chunker.fingerprint()

    async def chunk_many(self, documents: list[Document]) -> list[list[Chunk]]:
        return await self.chunker.chunk_many(documents)
