"""The embedded store: Qdrant's engine in-process (qdrant-edge), one shard for all strategies.

Named vectors: ``dense`` (cosine, HNSW), ``splade`` (sparse dot product) and ``bm25``
(sparse, IDF modifier: the engine keeps document frequencies and applies IDF at query time).
Payload indexes on tenant_id, doc_id and section. One process owns a shard directory.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import qdrant_edge as edge

from serve_app.config import AppConfig, EmbeddedStoreConfig
from serve_app.errors import ModelMismatchError, ServiceUnavailableError
from serve_app.schemas import Chunk, DocumentInfo, SearchFilters, SparseVector, Strategy
from serve_app.stores.base import (
    TOPOLOGIES,
    DocumentWrite,
    Hit,
    IndexModels,
    QueryVectors,
    SearchViaBatch,
    document_info_from,
)

META_FILE = "index_meta.json"
SHARD_DIR = "shard"
_EXTRA_PAYLOAD = ("content_hash",)
_SCROLL_PAGE = 1000


def _sparse(vector: SparseVector) -> edge.SparseVector:
    return edge.SparseVector(indices=list(vector.indices), values=list(vector.values))


def _match(key: str, value: object) -> edge.FieldCondition:
    if isinstance(value, list):
        return edge.FieldCondition(key=key, match=edge.MatchAny(value))
    if isinstance(value, float) and not isinstance(value, bool):
        return edge.FieldCondition(key=key, range=edge.RangeFloat(gte=value, lte=value))
    return edge.FieldCondition(key=key, match=edge.MatchValue(value))


def build_filter(
    tenant_id: str, filters: SearchFilters | None, doc_id: str | None = None
) -> edge.Filter:
    must: list = [_match("tenant_id", tenant_id)]
    if doc_id is not None:
        must.append(_match("doc_id", doc_id))
    if filters is not None:
        if filters.doc_ids:
            must.append(_match("doc_id", list(filters.doc_ids)))
        if filters.sections:
            must.append(_match("section", list(filters.sections)))
        for key, value in sorted(filters.metadata.items()):
            must.append(_match(f"metadata.{key}", value))
    return edge.Filter(must=must)


class EmbeddedIndex(SearchViaBatch):
    strategies: tuple[Strategy, ...] = ("bm25", "splade", "dense")

    def __init__(self, path: str | Path, config: EmbeddedStoreConfig) -> None:
        self.path = Path(path)
        self.config = config
        self._shard: edge.EdgeShard | None = None
        self._write_lock = threading.Lock()
        self._models: IndexModels | None = None

    # -- lifecycle ---------------------------------------------------------------------
    def _edge_config(self, models: IndexModels) -> edge.EdgeConfig:
        hnsw = edge.HnswIndexConfig(
            m=self.config.hnsw_m,
            ef_construct=self.config.hnsw_ef_construct,
            full_scan_threshold=self.config.full_scan_threshold_kb,
        )
        return edge.EdgeConfig(
            vectors={
                "dense": edge.EdgeVectorParams(
                    size=models.dense_dim, distance=edge.Distance.Cosine, hnsw_config=hnsw
                )
            },
            sparse_vectors={
                "splade": edge.EdgeSparseVectorParams(),
                "bm25": edge.EdgeSparseVectorParams(modifier=edge.Modifier.Idf),
            },
        )

    def _open_sync(self, models: IndexModels) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        meta_path = self.path / META_FILE
        if meta_path.exists():
            stored = json.loads(meta_path.read_text())
            if stored != models.as_dict():
                changed = {
                    k: (stored.get(k), v) for k, v in models.as_dict().items() if stored.get(k) != v
                }
                raise ModelMismatchError(
                    f"the index at {self.path} was built with other models "
                    f"({', '.join(f'{k}: {a!r} -> {b!r}' for k, (a, b) in changed.items())}); "
                    "re-index into a new data_dir, or delete the old index to rebuild it"
                )
        shard_path = self.path / SHARD_DIR
        try:
            if (shard_path / "segments").exists() or any(shard_path.glob("*")):
                self._shard = edge.EdgeShard.load(str(shard_path))
            else:
                self._shard = edge.EdgeShard.create(str(shard_path), self._edge_config(models))
                for field in ("tenant_id", "doc_id", "section"):
                    self._shard.update(
                        edge.UpdateOperation.create_field_index(
                            field, edge.PayloadSchemaType.Keyword
                        )
                    )
        except (OSError, RuntimeError, ValueError) as error:
            raise ServiceUnavailableError(
                f"cannot open the embedded index at {shard_path}: {error}"
            ) from None
        meta_path.write_text(json.dumps(models.as_dict(), indent=2))
        self._models = models

    async def open(self, models: IndexModels) -> None:
        await asyncio.to_thread(self._open_sync, models)

    @property
    def shard(self) -> edge.EdgeShard:
        if self._shard is None:
            raise ServiceUnavailableError("the embedded index is not open")
        return self._shard

    async def close(self) -> None:
        if self._shard is not None:
            with self._write_lock:
                self._shard.flush()
                self._shard.close()
                self._shard = None

    async def healthy(self) -> bool:
        return self._shard is not None

    # -- writes --------------------------------------------------------------------------
    def _write_sync(self, tenant_id: str, writes: list[DocumentWrite]) -> int:
        points = []
        for write in writes:
            for encoded in write.chunks:
                chunk = encoded.chunk
                vector: dict = {"dense": [float(x) for x in encoded.dense]}
                if encoded.splade is not None:
                    vector["splade"] = _sparse(encoded.splade)
                if encoded.bm25 is not None:
                    vector["bm25"] = _sparse(encoded.bm25)
                payload = chunk.model_dump(mode="json")
                payload["content_hash"] = write.content_hash
                points.append(edge.Point(chunk.id, vector, payload))
        removed = 0
        with self._write_lock:
            shard = self.shard
            # One upsert for the whole batch: new chunks land before any old one is removed,
            # so a document is never missing from search while it is being replaced.
            if points:
                shard.update(edge.UpdateOperation.upsert_points(points))
            for write in writes:
                keep = {encoded.chunk.id for encoded in write.chunks}
                stale = edge.Filter(
                    must=[_match("tenant_id", tenant_id), _match("doc_id", write.doc_id)],
                    must_not=[edge.HasIdCondition(keep)] if keep else None,
                )
                count = shard.count(edge.CountRequest(exact=True, filter=stale))
                if count:
                    shard.update(edge.UpdateOperation.delete_points_by_filter(stale))
                    removed += count
            shard.flush()
        return removed

    async def write_documents(self, tenant_id: str, writes: list[DocumentWrite]) -> int:
        return await asyncio.to_thread(self._write_sync, tenant_id, writes)

    def _delete_sync(self, tenant_id: str, doc_id: str) -> int:
        selector = build_filter(tenant_id, None, doc_id=doc_id)
        with self._write_lock:
            count = self.shard.count(edge.CountRequest(exact=True, filter=selector))
            if count:
                self.shard.update(edge.UpdateOperation.delete_points_by_filter(selector))
                self.shard.flush()
        return count

    async def delete_document(self, tenant_id: str, doc_id: str) -> int:
        return await asyncio.to_thread(self._delete_sync, tenant_id, doc_id)

    # -- reads ---------------------------------------------------------------------------
    def _scroll(self, selector: edge.Filter, fields: list[str] | None) -> list[dict]:
        payloads: list[dict] = []
        offset = None
        with_payload = edge.PayloadSelector.Include(fields) if fields else True
        while True:
            records, offset = self.shard.scroll(
                edge.ScrollRequest(
                    offset=offset, limit=_SCROLL_PAGE, filter=selector, with_payload=with_payload
                )
            )
            payloads.extend(dict(r.payload or {}) for r in records)
            if offset is None or not records:
                return payloads

    def _hashes_sync(self, tenant_id: str, doc_ids: list[str]) -> dict[str, str]:
        if not doc_ids:
            return {}
        selector = edge.Filter(
            must=[_match("tenant_id", tenant_id), _match("doc_id", list(doc_ids))]
        )
        return {
            p["doc_id"]: p["content_hash"]
            for p in self._scroll(selector, ["doc_id", "content_hash"])
        }

    async def document_hashes(self, tenant_id: str, doc_ids: list[str]) -> dict[str, str]:
        return await asyncio.to_thread(self._hashes_sync, tenant_id, doc_ids)

    def _info_sync(self, tenant_id: str, doc_id: str) -> DocumentInfo | None:
        payloads = self._scroll(build_filter(tenant_id, None, doc_id=doc_id), None)
        return document_info_from(tenant_id, doc_id, payloads)

    async def document_info(self, tenant_id: str, doc_id: str) -> DocumentInfo | None:
        return await asyncio.to_thread(self._info_sync, tenant_id, doc_id)

    def _request(
        self,
        strategy: Strategy,
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None,
    ) -> edge.QueryRequest | None:
        """The engine request for one strategy, or None when the query has no terms."""
        if strategy == "dense":
            if query.dense is None:
                raise ValueError("dense search needs a dense query vector")
            vector: object = [float(x) for x in query.dense]
            params = edge.SearchParams(hnsw_ef=self.config.hnsw_ef, exact=self.config.exact)
        else:
            sparse = query.splade if strategy == "splade" else query.bm25
            if sparse is None:
                raise ValueError(f"{strategy} search needs a {strategy} query vector")
            if not len(sparse):
                return None
            vector = _sparse(sparse)
            # BM25 document frequencies come from the tenant's own chunks: scores never depend
            # on (or reveal) what other tenants indexed.
            tenant_only = edge.Filter(must=[_match("tenant_id", tenant_id)])
            params = (
                edge.SearchParams(idf=edge.IdfParams(corpus=tenant_only))
                if strategy == "bm25"
                else None
            )
        return edge.QueryRequest(
            limit=limit,
            query=edge.Query.Nearest(vector, using=strategy),
            filter=build_filter(tenant_id, filters),
            with_payload=edge.PayloadSelector.Include(["doc_id"]),
            params=params,
        )

    def _search_many_sync(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None,
    ) -> dict[str, list[Hit]]:
        requests = {s: self._request(s, query, limit, tenant_id, filters) for s in strategies}
        runnable = [s for s in strategies if requests[s] is not None]
        results: dict[str, list[Hit]] = {s: [] for s in strategies}
        if runnable:
            batch = self.shard.query_batch(edge.QueryBatchRequest([requests[s] for s in runnable]))
            for strategy, points in zip(runnable, batch, strict=True):
                results[strategy] = [
                    Hit(str(p.id), p.payload["doc_id"], float(p.score)) for p in points
                ]
        return results

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[Hit]]:
        return await asyncio.to_thread(
            self._search_many_sync, strategies, query, limit, tenant_id, filters
        )

    def _fetch_sync(self, tenant_id: str, chunk_ids: list[str]) -> list[Chunk]:
        if not chunk_ids:
            return []
        records = self.shard.retrieve(list(chunk_ids), with_payload=True, with_vector=False)
        by_id = {str(r.id): r.payload for r in records}
        found = [by_id.get(i) for i in chunk_ids]
        return [_chunk(p) for p in found if p is not None and p.get("tenant_id") == tenant_id]

    async def fetch(self, tenant_id: str, chunk_ids: list[str]) -> list[Chunk]:
        return await asyncio.to_thread(self._fetch_sync, tenant_id, chunk_ids)

    async def count(self, tenant_id: str | None = None) -> int:
        selector = edge.Filter(must=[_match("tenant_id", tenant_id)]) if tenant_id else None
        return await asyncio.to_thread(
            self.shard.count, edge.CountRequest(exact=True, filter=selector)
        )


def _chunk(payload: dict | None) -> Chunk:
    # The payload was written from a validated Chunk; re-validating hundreds of candidates per
    # query costs more than the search itself, so it is trusted here.
    data = {k: v for k, v in (payload or {}).items() if k not in _EXTRA_PAYLOAD}
    return Chunk.model_construct(**data)


@TOPOLOGIES.register("embedded")
def _build(config: AppConfig) -> EmbeddedIndex:
    return EmbeddedIndex(config.data_path / config.stores.embedded.path, config.stores.embedded)
