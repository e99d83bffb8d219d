"""The value types that cross the store protocols: what built an index (``IndexModels``),
the encoded chunks a write carries, the query vectors a search carries, and the hits it
returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from serve_app.schemas import Chunk, ScopeKey, SearchFilters, SparseVector, Strategy

PAYLOAD_SCHEMA = 2
"""Version of the chunk payload layout (2: every chunk carries its ``collection``); recorded
with the models, so an index written with another layout is refused like other models."""

PAYLOAD_INDEXES = ("tenant_id", "collection", "doc_id", "section")
"""The payload fields every chunk store indexes for its filters (checked by ``validate``)."""


@dataclass(frozen=True)
class IndexModels:
    """What built the vectors (and the payload layout); stored with the index and checked on
    every open. The revisions are the Hub commits of the weights (serve_app/model_manifest.py:
    loaded_revision); recorded only when known, so an index of models without one (a
    ``package:`` model) reads as before."""

    dense_model: str
    dense_dim: int
    splade_model: str | None
    bm25_model: str | None
    payload_schema: int = PAYLOAD_SCHEMA
    dense_revision: str | None = None
    splade_revision: str | None = None

    def as_dict(self) -> dict[str, Any]:
        recorded = {
            "dense_model": self.dense_model,
            "dense_revision": self.dense_revision,
            "dense_dim": self.dense_dim,
            "splade_model": self.splade_model,
            "splade_revision": self.splade_revision,
            "bm25_model": self.bm25_model,
            "payload_schema": self.payload_schema,
        }
        return {
            key: value
            for key, value in recorded.items()
            if value is not None or not key.endswith("_revision")
        }


@dataclass
class EncodedChunk:
    chunk: Chunk
    dense: np.ndarray
    splade: SparseVector | None = None
    bm25: SparseVector | None = None


@dataclass
class DocumentWrite:
    """All chunks of one document, replacing whatever the index held for it."""

    doc_id: str
    content_hash: str
    chunks: list[EncodedChunk] = field(default_factory=list)


@dataclass
class QueryVectors:
    text: str
    dense: np.ndarray | None = None
    splade: SparseVector | None = None
    bm25: SparseVector | None = None


class Hit(NamedTuple):
    """A retrieval hit by reference: chunks themselves are fetched only for the final results
    (``ChunkIndex.fetch``), so candidates cost ids and scores, not payloads. ``doc_id`` is
    empty when the search did not ask for it (``SearchQuery.doc_ids``). A named tuple: a
    search makes one per candidate per strategy, and a tuple is cheaper to make than a
    frozen dataclass."""

    chunk_id: str
    doc_id: str
    score: float


@dataclass
class SearchQuery:
    """One query's search over ``strategies``. ``doc_ids`` fills ``Hit.doc_id``, which costs a
    payload read per hit in Qdrant: evaluation needs it, the search path does not."""

    strategies: list[Strategy]
    query: QueryVectors
    limit: int
    scope: ScopeKey
    filters: SearchFilters | None = None
    doc_ids: bool = True


@dataclass(frozen=True)
class StrategyQuery:
    """One strategy of one ``SearchQuery``: what a backend runs."""

    strategy: Strategy
    query: QueryVectors
    limit: int
    scope: ScopeKey
    filters: SearchFilters | None
    doc_ids: bool


DocumentStates = dict[str, tuple[str, int, int]]
"""doc id -> (content hash, chunks stored with it, chunks the document has); only documents
whose stored chunks all carry one hash."""
