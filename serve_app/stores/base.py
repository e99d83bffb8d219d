"""The store protocol the pipelines depend on, and the value types that cross it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from serve_app.registry import Registry
from serve_app.schemas import Chunk, DocumentInfo, SearchFilters, SparseVector, Strategy


@dataclass(frozen=True)
class IndexModels:
    """What built the vectors; stored with the index and checked on every open."""

    dense_model: str
    dense_dim: int
    splade_model: str | None
    bm25_model: str | None

    def as_dict(self) -> dict:
        return {
            "dense_model": self.dense_model,
            "dense_dim": self.dense_dim,
            "splade_model": self.splade_model,
            "bm25_model": self.bm25_model,
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


@dataclass(frozen=True)
class Hit:
    """A retrieval hit by reference: chunks themselves are fetched only for the final results
    (``ChunkIndex.fetch``), so candidates cost ids and scores, not payloads."""

    chunk_id: str
    doc_id: str
    score: float


@runtime_checkable
class ChunkIndex(Protocol):
    """Chunk storage and per-strategy retrieval. Every call is scoped to one tenant."""

    strategies: tuple[Strategy, ...]

    async def open(self, models: IndexModels) -> None:
        """Create or open the index; refuse (ModelMismatchError) vectors from other models."""
        ...

    async def write_documents(self, tenant_id: str, writes: list[DocumentWrite]) -> int:
        """Upsert each document's chunks, then remove its stale chunks; returns stale removed."""
        ...

    async def delete_document(self, tenant_id: str, doc_id: str) -> int: ...

    async def document_hashes(self, tenant_id: str, doc_ids: list[str]) -> dict[str, str]: ...

    async def document_info(self, tenant_id: str, doc_id: str) -> DocumentInfo | None: ...

    async def search(
        self,
        strategy: Strategy,
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None = None,
    ) -> list[Hit]: ...

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[Hit]]:
        """Every strategy for one query in one call: one round trip to a remote store."""
        ...

    async def fetch(self, tenant_id: str, chunk_ids: list[str]) -> list[Chunk]:
        """The tenant's chunks with these ids, in the order asked (unknown ids are skipped)."""
        ...

    async def count(self, tenant_id: str | None = None) -> int: ...

    async def healthy(self) -> bool: ...

    async def close(self) -> None: ...


TOPOLOGIES: Registry[ChunkIndex] = Registry("store topology", "stores.topology")


class SearchViaBatch:
    """``search`` for stores whose one round trip is ``search_many``."""

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[Hit]]:
        raise NotImplementedError

    async def search(
        self,
        strategy: Strategy,
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None = None,
    ) -> list[Hit]:
        return (await self.search_many([strategy], query, limit, tenant_id, filters))[strategy]


def document_info_from(tenant_id: str, doc_id: str, payloads: list[dict]) -> DocumentInfo | None:
    """A document's info from its stored chunk payloads (any order); None when there are none."""
    if not payloads:
        return None
    ordered = sorted(payloads, key=lambda p: p["order"])
    first = ordered[0]
    return DocumentInfo(
        id=doc_id,
        tenant_id=tenant_id,
        title=first.get("title", ""),
        # imrad labels are per chunk (set by the chunker), not document metadata.
        metadata={k: v for k, v in first.get("metadata", {}).items() if k != "imrad"},
        source=first.get("source"),
        content_hash=first["content_hash"],
        chunk_ids=[p["id"] for p in ordered],
    )


DocumentStates = dict[str, tuple[str, int, int]]
"""doc id -> (content hash, chunks stored with it, chunks the document has)."""


def complete_hashes(states: DocumentStates) -> dict[str, str]:
    """Hashes of the documents stored completely: every chunk present under one hash."""
    return {d: h for d, (h, stored, expected) in states.items() if stored == expected}


def versioned_names(alias: str, names: list[str]) -> list[str]:
    """The ``{alias}-v{n}`` names among ``names``, oldest first."""
    pattern = re.compile(rf"^{re.escape(alias)}-v(\d+)$")
    found = [(int(m.group(1)), n) for n in names if (m := pattern.match(n))]
    return [n for _, n in sorted(found)]


def next_version_name(alias: str, names: list[str]) -> str:
    existing = versioned_names(alias, names)
    version = int(existing[-1].rsplit("-v", 1)[1]) + 1 if existing else 1
    return f"{alias}-v{version}"
