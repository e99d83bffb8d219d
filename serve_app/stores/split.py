"""The ``opensearch+qdrant`` topology: BM25 and SPLADE in OpenSearch, dense in Qdrant.

Consistency across the two stores, without distributed transactions:

* A chunk is visible to search only when **both** stores hold it: final results are fetched
  from both and a chunk missing from either is dropped. Chunk ids are derived from the chunk's
  text, so the same id in both stores is the same chunk.
* Writes go to Qdrant first, then OpenSearch; deletes go the other way. If either store fails,
  the documents of the call are withdrawn from both (best effort) and the call fails; whatever
  a failed withdrawal leaves behind is in one store only, hence invisible.
* ``document_hashes`` reports a document as stored only when both stores hold all of its
  chunks under the same content hash, so a retry after any failure rewrites it; upserts by
  deterministic ids make the retry converge without duplicates.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from serve_app.config import AppConfig
from serve_app.errors import ServeAppError
from serve_app.schemas import Chunk, DocumentInfo, SearchFilters, Strategy
from serve_app.stores.base import (
    TOPOLOGIES,
    DocumentWrite,
    Hit,
    IndexModels,
    QueryVectors,
    SearchViaBatch,
)
from serve_app.stores.opensearch_store import OpenSearchIndex, source_to_chunk
from serve_app.stores.qdrant_store import QdrantIndex

log = logging.getLogger(__name__)


class SplitIndex(SearchViaBatch):
    strategies: tuple[Strategy, ...] = ("bm25", "splade", "dense")

    def __init__(self, text: OpenSearchIndex, vectors: QdrantIndex) -> None:
        self.text = text
        self.vectors = vectors

    async def open(self, models: IndexModels) -> None:
        await asyncio.gather(self.text.open(models), self.vectors.open(models))

    async def close(self) -> None:
        await asyncio.gather(self.text.close(), self.vectors.close())

    async def healthy(self) -> bool:
        return all(await asyncio.gather(self.text.healthy(), self.vectors.healthy()))

    # -- writes --------------------------------------------------------------------------
    async def _withdraw(self, tenant_id: str, doc_ids: list[str]) -> None:
        for doc_id in doc_ids:
            for store in (self.text, self.vectors):
                try:
                    await store.delete_document(tenant_id, doc_id)
                except ServeAppError as error:
                    # Left in one store only: invisible (see module docstring); a retry cleans up.
                    log.warning(
                        "could not withdraw %s from %s: %s", doc_id, type(store).__name__, error
                    )

    async def write_documents(self, tenant_id: str, writes: list[DocumentWrite]) -> int:
        doc_ids = [w.doc_id for w in writes]
        try:
            await self.vectors.write_documents(tenant_id, writes)
            return await self.text.write_documents(tenant_id, writes)
        except ServeAppError as error:
            await self._withdraw(tenant_id, doc_ids)
            error.message = (
                f"{error.message}; the documents of this request were withdrawn from search, "
                "retry the request"
            )
            error.args = (error.message,)
            raise

    async def delete_document(self, tenant_id: str, doc_id: str) -> int:
        removed = await self.text.delete_document(tenant_id, doc_id)
        return max(removed, await self.vectors.delete_document(tenant_id, doc_id))

    # -- reads ---------------------------------------------------------------------------
    async def document_hashes(self, tenant_id: str, doc_ids: list[str]) -> dict[str, str]:
        text, vectors = await asyncio.gather(
            self.text.document_hashes(tenant_id, doc_ids),
            self.vectors.document_hashes(tenant_id, doc_ids),
        )
        return {d: h for d, h in text.items() if vectors.get(d) == h}

    async def document_info(self, tenant_id: str, doc_id: str) -> DocumentInfo | None:
        return await self.text.document_info(tenant_id, doc_id)

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[Hit]]:
        text_side = [s for s in strategies if s in self.text.strategies]
        jobs = []
        if text_side:
            jobs.append(self.text.search_many(text_side, query, limit, tenant_id, filters))
        if "dense" in strategies:
            jobs.append(self.vectors.search_many(["dense"], query, limit, tenant_id, filters))
        merged: dict[str, list[Hit]] = {}
        for part in await asyncio.gather(*jobs):
            merged.update(part)
        return {s: merged[s] for s in strategies}

    async def fetch(self, tenant_id: str, chunk_ids: list[str]) -> list[Chunk]:
        sources, present = await asyncio.gather(
            self.text.fetch_sources(tenant_id, chunk_ids),
            self.vectors.fetch_payloads(tenant_id, chunk_ids, fields=["tenant_id"]),
        )
        return [source_to_chunk(sources[i]) for i in chunk_ids if i in sources and i in present]

    async def count(self, tenant_id: str | None = None) -> int:
        return await self.text.count(tenant_id)

    # -- snapshots -----------------------------------------------------------------------
    async def create_snapshot(self, name: str) -> list[dict[str, Any]]:
        return [await self.text.create_snapshot(name), await self.vectors.create_snapshot(name)]

    async def list_snapshots(self) -> list[dict[str, Any]]:
        return [*await self.text.list_snapshots(), *await self.vectors.list_snapshots()]


@TOPOLOGIES.register("opensearch+qdrant")
def _build_split(config: AppConfig) -> SplitIndex:
    stores = config.stores
    return SplitIndex(
        OpenSearchIndex(stores.opensearch, migrate=stores.migrate),
        QdrantIndex(stores.qdrant, config.data_path, strategies=("dense",), migrate=stores.migrate),
    )


@TOPOLOGIES.register("qdrant")
def _build_qdrant(config: AppConfig) -> QdrantIndex:
    return QdrantIndex(
        config.stores.qdrant,
        config.data_path,
        strategies=tuple(config.enabled_strategies()),
        migrate=config.stores.migrate,
    )
