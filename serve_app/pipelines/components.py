"""Builds the components a configuration names, behind their protocols."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from serve_app.chunking.base import CHUNKERS, Chunker
from serve_app.chunking.tokens import TokenCounter
from serve_app.config import AppConfig, resolve_model_path
from serve_app.encoders.base import (
    DENSE_BACKENDS,
    RERANKER_BACKENDS,
    DenseEncoder,
    Reranker,
    SparseEncoder,
)
from serve_app.model_manifest import loaded_revision
from serve_app.pipelines.retrieval import IndexRetriever, Retriever
from serve_app.stores.base import TOPOLOGIES, IndexModels, ServedIndex

log = logging.getLogger(__name__)


@dataclass
class Components:
    config: AppConfig
    chunker: Chunker
    dense: DenseEncoder
    sparse: dict[str, SparseEncoder]
    reranker: Reranker | None
    index: ServedIndex  # in process, a whole topology; on Ray, the store deployment's seam
    # Search, fusion and fetch in one call; by default next to ``index`` (in process).
    retriever: Retriever | None = None

    def __post_init__(self) -> None:
        if self.retriever is None:
            self.retriever = IndexRetriever(self.index, self.config.search.retrieve_batch)

    def models(self) -> IndexModels:
        # A dense model served by another deployment says which revision its replica loaded.
        revision = getattr(self.dense, "revision", None)
        return index_models(self.config, self.dense.model_id, self.dense.dim, revision)

    def fingerprint(self) -> dict[str, Any]:
        """Everything that shapes stored chunks and vectors (part of each document's hash)."""
        return {
            "chunker": self.chunker.fingerprint(),
            "models": self.models().as_dict(),
            "dense": self.config.dense.model_dump(
                include={"max_length", "pooling", "append_token", "output_dim"}
            ),
            "splade": self.config.splade.model_dump(
                include={"max_length", "doc_top_k", "min_weight"}
            ),
        }

    async def close(self) -> None:
        await self.index.close()
        for model in (self.dense, *self.sparse.values(), self.reranker):
            close = getattr(model, "close", None)  # models with a queue or an engine
            if close is not None:
                close()


def index_models(
    config: AppConfig, dense_model: str, dense_dim: int, dense_revision: str | None = None
) -> IndexModels:
    """What the index records about the models of ``config``; the dense model's id and
    dimension are given (the dimension is known once the model is loaded), and its revision
    where the process that loaded it said (else read here: ``dense_model_revision``)."""
    from serve_app.encoders.bm25 import bm25_model_id

    splade = config.splade
    return IndexModels(
        dense_model=dense_model,
        dense_revision=dense_revision or dense_model_revision(config),
        dense_dim=dense_dim,
        splade_model=splade.model if splade.enabled else None,
        splade_revision=(
            loaded_revision(splade.model, splade.revision, "splade.revision")
            if splade.enabled
            else None
        ),
        bm25_model=bm25_model_id(config.bm25) if config.bm25.enabled else None,
    )


def dense_model_revision(config: AppConfig) -> str | None:
    """The revision of the dense weights this process would load (ModelMismatchError when
    the model cache holds another one than ``dense.revision``)."""
    return loaded_revision(config.dense.model, config.dense.revision, "dense.revision")


def build_chunker(config: AppConfig, dense: DenseEncoder | None = None) -> Chunker:
    tokenizer_path = resolve_model_path(*config.chunker_tokenizer())
    extra = 1 if config.dense.append_token else 0
    counter = TokenCounter.from_path(tokenizer_path, extra_reserved=extra)
    embedder = getattr(dense, "encode", None)
    return CHUNKERS.create(config.chunker.name, counter, config.chunker, embedder=embedder)


def build_sparse(config: AppConfig) -> dict[str, SparseEncoder]:
    from serve_app.encoders.bm25 import Bm25Encoder
    from serve_app.encoders.splade import SpladeEncoder

    sparse: dict[str, SparseEncoder] = {}
    if config.bm25.enabled:
        sparse["bm25"] = Bm25Encoder(config.bm25)
    if config.splade.enabled:
        sparse["splade"] = SpladeEncoder(config.splade)
    return sparse


async def build_components(
    config: AppConfig,
    *,
    chunker: Chunker | None = None,
    dense: DenseEncoder | None = None,
    sparse: dict[str, SparseEncoder] | None = None,
    reranker: Reranker | None = None,
    index: ServedIndex | None = None,
    retriever: Retriever | None = None,
) -> Components:
    """The components ``config`` names, with the index opened for their models (the model
    guard). Each part not given is built here (its model loaded once); the Ray Serve ingress
    gives the parts that run in other deployments (adapters over their handles)."""
    if config.splade.enabled and config.splade.max_length < config.chunker.max_tokens:
        log.warning("splade.max_length is below chunker.max_tokens: SPLADE sees truncated chunks")
    if dense is None:
        dense = DENSE_BACKENDS.create(config.dense.backend, config.dense)
    if reranker is None and config.reranker.enabled:
        reranker = RERANKER_BACKENDS.create(config.reranker.backend, config.reranker)
    components = Components(
        config=config,
        chunker=chunker or build_chunker(config, dense),
        dense=dense,
        sparse=build_sparse(config) if sparse is None else sparse,
        reranker=reranker,
        index=index or TOPOLOGIES.create(config.stores.topology, config),
        retriever=retriever,
    )
    await components.index.open(components.models())
    return components
