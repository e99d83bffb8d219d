"""Qdrant requests, built once: filters, per-strategy queries, points. The two Qdrant
backends (qdrant-edge in process, qdrant-client for a server) translate these neutral values
into their own object models and nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serve_app.schemas import Chunk, ScopeKey, SearchFilters, Strategy
from serve_app.stores.scope import SCOPE_FIELDS, scope_payload
from serve_app.stores.values import DocumentWrite, EncodedChunk, StrategyQuery

STORE_ONLY = (*SCOPE_FIELDS, "content_hash", "chunk_count")
"""Payload keys the store adds to a chunk's fields."""


@dataclass(frozen=True)
class Condition:
    """``key`` equals ``value`` (str, int, bool), lies in it (a list), or equals a float."""

    key: str
    value: Any


@dataclass(frozen=True)
class Filter:
    must: tuple[Condition, ...]
    exclude_ids: tuple[str, ...] = ()


def chunk_filter(
    scope: ScopeKey | None,
    filters: SearchFilters | None = None,
    doc_ids: list[str] | None = None,
    exclude_ids: list[str] | None = None,
    heads: bool = False,
) -> Filter:
    """Chunks of ``scope`` (None: all); with ``heads``, each document's first chunk only."""
    must: list[Condition] = []
    if scope is not None:
        must.append(Condition("tenant_id", scope.tenant))
        if scope.collection is not None:
            must.append(Condition("collection", scope.collection))
    if doc_ids is not None:
        must.append(Condition("doc_id", list(doc_ids)))
    if heads:
        must.append(Condition("order", 0))
    if filters is not None:
        if filters.doc_ids:
            must.append(Condition("doc_id", list(filters.doc_ids)))
        if filters.sections:
            must.append(Condition("section", list(filters.sections)))
        for key, value in sorted(filters.metadata.items()):
            must.append(Condition(f"metadata.{key}", value))
    return Filter(tuple(must), tuple(exclude_ids or ()))


@dataclass(frozen=True)
class DenseSearch:
    vector: list[float]


@dataclass(frozen=True)
class SparseSearch:
    indices: list[int]
    values: list[float]
    idf_scope: ScopeKey | None  # BM25: document frequencies from this scope's chunks only


@dataclass(frozen=True)
class QueryPlan:
    using: Strategy
    search: DenseSearch | SparseSearch
    limit: int
    filter: Filter
    with_doc_id: bool


def query_plan(query: StrategyQuery) -> QueryPlan | None:
    """The request for one strategy, or None when the query has no terms for it."""
    vectors = query.query
    if query.strategy == "dense":
        if vectors.dense is None:
            raise ValueError("dense search needs a dense query vector")
        search: DenseSearch | SparseSearch = DenseSearch(vectors.dense.tolist())
    else:
        sparse = vectors.splade if query.strategy == "splade" else vectors.bm25
        if sparse is None:
            raise ValueError(f"{query.strategy} search needs a {query.strategy} query vector")
        if not len(sparse):
            return None
        # BM25 document frequencies come from the scope's own chunks: scores never depend
        # on (or reveal) what other tenants or collections indexed.
        idf = query.scope if query.strategy == "bm25" else None
        search = SparseSearch(list(sparse.indices), list(sparse.values), idf)
    return QueryPlan(
        using=query.strategy,
        search=search,
        limit=query.limit,
        filter=chunk_filter(query.scope, query.filters),
        with_doc_id=query.doc_ids,
    )


def point_payload(scope: ScopeKey, write: DocumentWrite, encoded: EncodedChunk) -> dict[str, Any]:
    payload = {**encoded.chunk.model_dump(mode="json"), **scope_payload(scope)}
    payload["content_hash"] = write.content_hash
    payload["chunk_count"] = len(write.chunks)
    return payload


def point_vectors(
    encoded: EncodedChunk, strategies: tuple[Strategy, ...]
) -> dict[str, list[float] | tuple[list[int], list[float]]]:
    """Named vectors: ``dense`` always; the sparse ones this store serves, as (ids, values)."""
    vectors: dict[str, Any] = {"dense": encoded.dense.tolist()}
    for name in ("splade", "bm25"):
        sparse = getattr(encoded, name)
        if name in strategies and sparse is not None:
            vectors[name] = (list(sparse.indices), list(sparse.values))
    return vectors


def payload_to_chunk(payload: dict[str, Any]) -> Chunk:
    # The payload was written from a validated Chunk by this store; re-validating hundreds of
    # candidates per query costs more than the search itself, so it is trusted here.
    return Chunk.model_construct(**{k: v for k, v in payload.items() if k not in STORE_ONLY})
