"""Qdrant server adapter (qdrant-client, async): dense vectors, and in the ``qdrant`` topology
SPLADE and BM25 sparse vectors too (BM25 with the IDF modifier, IDF from the tenant's chunks).

``collection`` in config is an alias in front of ``{collection}-v{n}``; the models that built
the vectors are the collection's metadata. The same client runs against qdrant-client's local
mode (``local_path``), which speaks the same API with exact search and no snapshots.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import httpx
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from serve_app.config import QdrantConfig
from serve_app.errors import ConfigError, ModelMismatchError, ServiceUnavailableError
from serve_app.schemas import Chunk, DocumentInfo, SearchFilters, SparseVector, Strategy
from serve_app.stores.base import (
    DocumentStates,
    DocumentWrite,
    Hit,
    IndexModels,
    QueryVectors,
    SearchViaBatch,
    complete_hashes,
    document_info_from,
    next_version_name,
)

log = logging.getLogger(__name__)

_STORE_ONLY = ("content_hash", "chunk_count")
_SCROLL_PAGE = 1000
_CLIENT_ERRORS = (UnexpectedResponse, ResponseHandlingException, httpx.HTTPError, OSError)


class QdrantStoreError(ServiceUnavailableError):
    """Qdrant refused or could not complete a request."""


def _match(key: str, value: object) -> qm.FieldCondition:
    if isinstance(value, list):
        return qm.FieldCondition(key=key, match=qm.MatchAny(any=value))
    if isinstance(value, float):
        return qm.FieldCondition(key=key, range=qm.Range(gte=value, lte=value))
    return qm.FieldCondition(key=key, match=qm.MatchValue(value=value))  # type: ignore[arg-type]


def build_filter(
    tenant_id: str | None,
    filters: SearchFilters | None = None,
    doc_ids: list[str] | None = None,
    exclude_ids: list[str] | None = None,
) -> qm.Filter:
    must: list[qm.Condition] = []
    if tenant_id is not None:
        must.append(_match("tenant_id", tenant_id))
    if doc_ids is not None:
        must.append(_match("doc_id", list(doc_ids)))
    if filters is not None:
        if filters.doc_ids:
            must.append(_match("doc_id", list(filters.doc_ids)))
        if filters.sections:
            must.append(_match("section", list(filters.sections)))
        for key, value in sorted(filters.metadata.items()):
            must.append(_match(f"metadata.{key}", value))
    must_not: list[qm.Condition] | None = (
        [qm.HasIdCondition(has_id=list(exclude_ids))] if exclude_ids else None
    )
    return qm.Filter(must=must, must_not=must_not)


def _sparse(vector: SparseVector) -> qm.SparseVector:
    return qm.SparseVector(indices=list(vector.indices), values=list(vector.values))


class QdrantIndex(SearchViaBatch):
    """Qdrant as the store for ``strategies``: ("dense",) or ("bm25", "splade", "dense")."""

    def __init__(
        self,
        config: QdrantConfig,
        data_path: Path,
        strategies: tuple[Strategy, ...] = ("bm25", "splade", "dense"),
        migrate: bool = False,
    ) -> None:
        self.config = config
        self.data_path = data_path
        self.strategies = strategies
        self.alias = config.collection
        self.migrate = migrate
        self.physical: str | None = None
        self._client: AsyncQdrantClient | None = None

    @property
    def client(self) -> AsyncQdrantClient:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def _make_client(self) -> AsyncQdrantClient:
        config = self.config
        if config.local_path:
            if config.local_path == ":memory:":
                return AsyncQdrantClient(location=":memory:")
            path = self.data_path / config.local_path
            path.mkdir(parents=True, exist_ok=True)
            return AsyncQdrantClient(path=str(path))
        if not config.url:
            raise ConfigError("stores.qdrant.url is not set")
        api_key = os.environ.get(config.api_key_env) if config.api_key_env else None
        if config.api_key_env and not api_key:
            raise ConfigError(f"stores.qdrant.api_key_env names {config.api_key_env}, not set")
        verify: bool | str = config.ca_certs or config.verify_certs
        return AsyncQdrantClient(
            url=config.url,
            api_key=api_key,
            timeout=int(config.timeout_s),
            verify=verify,
            check_compatibility=False,  # a blocking probe at construction; readiness covers it
        )

    async def _call(self, what: str, coro: Any) -> Any:
        try:
            return await coro
        except _CLIENT_ERRORS as error:
            raise QdrantStoreError(f"Qdrant failed during {what}: {error}") from None

    # -- lifecycle -----------------------------------------------------------------------
    def _vectors(self, models: IndexModels) -> dict[str, qm.VectorParams]:
        quantization = (
            qm.ScalarQuantization(
                scalar=qm.ScalarQuantizationConfig(type=qm.ScalarType.INT8, always_ram=True)
            )
            if self.config.quantization == "int8"
            else None
        )
        return {
            "dense": qm.VectorParams(
                size=models.dense_dim,
                distance=qm.Distance.COSINE,
                on_disk=self.config.on_disk,
                hnsw_config=qm.HnswConfigDiff(
                    m=self.config.hnsw_m, ef_construct=self.config.hnsw_ef_construct
                ),
                quantization_config=quantization,
            )
        }

    def _sparse_vectors(self) -> dict[str, qm.SparseVectorParams] | None:
        sparse = {}
        if "splade" in self.strategies:
            sparse["splade"] = qm.SparseVectorParams()
        if "bm25" in self.strategies:
            sparse["bm25"] = qm.SparseVectorParams(modifier=qm.Modifier.IDF)
        return sparse or None

    def _metadata(self, models: IndexModels) -> dict[str, Any]:
        stored = models.as_dict()
        if "splade" not in self.strategies:
            stored["splade_model"] = None
        if "bm25" not in self.strategies:
            stored["bm25_model"] = None
        return {"models": stored, "strategies": list(self.strategies)}

    async def _alias_target(self) -> str | None:
        response = await self.client.get_aliases()
        return next(
            (a.collection_name for a in response.aliases if a.alias_name == self.alias), None
        )

    async def _create_version(self, models: IndexModels, old: str | None) -> str:
        collections = (await self.client.get_collections()).collections
        name = next_version_name(self.alias, [c.name for c in collections])
        await self.client.create_collection(
            name,
            vectors_config=self._vectors(models),
            sparse_vectors_config=self._sparse_vectors(),
            shard_number=self.config.shard_number,
            replication_factor=self.config.replication_factor,
            metadata=self._metadata(models),
        )
        if not self.config.local_path:  # local mode has no payload indexes (and warns)
            await self.client.create_payload_index(
                name,
                "tenant_id",
                qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True),
            )
            for field in ("doc_id", "section"):
                await self.client.create_payload_index(name, field, qm.PayloadSchemaType.KEYWORD)
        operations: list[Any] = []
        if old is not None:
            operations.append(
                qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=self.alias))
            )
        operations.append(
            qm.CreateAliasOperation(
                create_alias=qm.CreateAlias(collection_name=name, alias_name=self.alias)
            )
        )
        await self.client.update_collection_aliases(change_aliases_operations=operations)
        return name

    async def _open(self, models: IndexModels) -> None:
        target = await self._alias_target()
        if target is None:
            self.physical = await self._create_version(models, None)
            return
        info = await self.client.get_collection(target)
        stored = (info.config.metadata or {}).get("models")
        wanted = self._metadata(models)["models"]
        if stored != wanted:
            if not self.migrate:
                raise ModelMismatchError(
                    f"Qdrant collection {target} (alias {self.alias}) was built with other "
                    f"models ({stored} vs {wanted}); set stores.migrate: true to create a new "
                    "collection version behind the alias and re-ingest"
                )
            log.warning("models changed: new Qdrant collection version behind %s", self.alias)
            self.physical = await self._create_version(models, target)
            return
        self.physical = target

    async def open(self, models: IndexModels) -> None:
        await self._call("open", self._open(models))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def healthy(self) -> bool:
        try:
            await self.client.get_collection(self.alias)
            return True
        except Exception:  # any failure means "not healthy"
            return False

    # -- writes --------------------------------------------------------------------------
    def _point(self, write: DocumentWrite, position: int) -> qm.PointStruct:
        encoded = write.chunks[position]
        vector: dict[str, Any] = {"dense": [float(x) for x in encoded.dense]}
        if "splade" in self.strategies and encoded.splade is not None:
            vector["splade"] = _sparse(encoded.splade)
        if "bm25" in self.strategies and encoded.bm25 is not None:
            vector["bm25"] = _sparse(encoded.bm25)
        payload = encoded.chunk.model_dump(mode="json")
        payload["content_hash"] = write.content_hash
        payload["chunk_count"] = len(write.chunks)
        return qm.PointStruct(id=encoded.chunk.id, vector=vector, payload=payload)

    async def _count(self, selector: qm.Filter) -> int:
        response = await self.client.count(self.alias, count_filter=selector, exact=True)
        return int(response.count)

    async def _delete_where(self, selector: qm.Filter) -> int:
        count = await self._count(selector)
        if count:
            await self.client.delete(
                self.alias, points_selector=qm.FilterSelector(filter=selector), wait=True
            )
        return count

    async def _write(self, tenant_id: str, writes: list[DocumentWrite]) -> int:
        points = [self._point(w, i) for w in writes for i in range(len(w.chunks))]
        size = self.config.upsert_batch_size
        for start in range(0, len(points), size):
            await self.client.upsert(self.alias, points=points[start : start + size], wait=True)
        removed = 0
        for write in writes:
            keep = [encoded.chunk.id for encoded in write.chunks]
            removed += await self._delete_where(
                build_filter(tenant_id, doc_ids=[write.doc_id], exclude_ids=keep)
            )
        return removed

    async def write_documents(self, tenant_id: str, writes: list[DocumentWrite]) -> int:
        return await self._call("write", self._write(tenant_id, writes))

    async def delete_document(self, tenant_id: str, doc_id: str) -> int:
        return await self._call(
            "delete", self._delete_where(build_filter(tenant_id, doc_ids=[doc_id]))
        )

    # -- reads ---------------------------------------------------------------------------
    async def _scroll(self, selector: qm.Filter, fields: list[str] | bool) -> list[qm.Record]:
        records: list[qm.Record] = []
        offset = None
        while True:
            page, offset = await self.client.scroll(
                self.alias,
                scroll_filter=selector,
                limit=_SCROLL_PAGE,
                offset=offset,
                with_payload=fields,
                with_vectors=False,
            )
            records.extend(page)
            if offset is None or not page:
                return records

    async def document_states(self, tenant_id: str, doc_ids: list[str]) -> DocumentStates:
        """Only documents stored under exactly one hash."""
        if not doc_ids:
            return {}
        records = await self._call(
            "document hashes",
            self._scroll(
                build_filter(tenant_id, doc_ids=doc_ids), ["doc_id", "content_hash", "chunk_count"]
            ),
        )
        seen: dict[str, dict[str, list[int]]] = {}
        for record in records:
            payload = record.payload or {}
            per_hash = seen.setdefault(payload["doc_id"], {})
            per_hash.setdefault(payload["content_hash"], []).append(int(payload["chunk_count"]))
        return {
            doc: (h, len(counts), max(counts))
            for doc, hashes in seen.items()
            if len(hashes) == 1
            for h, counts in hashes.items()
        }

    async def document_hashes(self, tenant_id: str, doc_ids: list[str]) -> dict[str, str]:
        return complete_hashes(await self.document_states(tenant_id, doc_ids))

    async def document_info(self, tenant_id: str, doc_id: str) -> DocumentInfo | None:
        records = await self._call(
            "document lookup", self._scroll(build_filter(tenant_id, doc_ids=[doc_id]), True)
        )
        return document_info_from(tenant_id, doc_id, [r.payload or {} for r in records])

    def _request(
        self,
        strategy: Strategy,
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None,
    ) -> qm.QueryRequest | None:
        if strategy not in self.strategies:
            raise ValueError(f"this Qdrant store does not serve the {strategy!r} strategy")
        params: qm.SearchParams | None
        if strategy == "dense":
            if query.dense is None:
                raise ValueError("dense search needs a dense query vector")
            vector: Any = [float(x) for x in query.dense]
            # Local mode always searches exactly and warns about index parameters.
            params = (
                None
                if self.config.local_path
                else qm.SearchParams(hnsw_ef=self.config.hnsw_ef, exact=self.config.exact)
            )
        else:
            sparse = query.splade if strategy == "splade" else query.bm25
            if sparse is None:
                raise ValueError(f"{strategy} search needs a {strategy} query vector")
            if not len(sparse):
                return None
            vector = _sparse(sparse)
            # BM25 document frequencies come from the tenant's own chunks only.
            params = (
                qm.SearchParams(idf=qm.IdfCorpusParams(corpus=build_filter(tenant_id)))
                if strategy == "bm25"
                else None
            )
        return qm.QueryRequest(
            query=vector,
            using=strategy,
            filter=build_filter(tenant_id, filters),
            limit=limit,
            params=params,
            with_payload=["doc_id"],
        )

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[Hit]]:
        requests = {s: self._request(s, query, limit, tenant_id, filters) for s in strategies}
        runnable = [s for s in strategies if requests[s] is not None]
        results: dict[str, list[Hit]] = {s: [] for s in strategies}
        if not runnable:
            return results
        responses = await self._call(
            "search",
            self.client.query_batch_points(self.alias, requests=[requests[s] for s in runnable]),
        )
        for strategy, response in zip(runnable, responses, strict=True):
            results[strategy] = [
                Hit(str(p.id), (p.payload or {})["doc_id"], float(p.score)) for p in response.points
            ]
        return results

    async def fetch_payloads(
        self, tenant_id: str, chunk_ids: list[str], fields: list[str] | bool = True
    ) -> dict[str, dict]:
        if not chunk_ids:
            return {}
        records = await self._call(
            "fetch",
            self.client.retrieve(
                self.alias, ids=list(chunk_ids), with_payload=fields, with_vectors=False
            ),
        )
        return {
            str(r.id): r.payload or {}
            for r in records
            if (r.payload or {}).get("tenant_id") == tenant_id
        }

    async def fetch(self, tenant_id: str, chunk_ids: list[str]) -> list[Chunk]:
        payloads = await self.fetch_payloads(tenant_id, chunk_ids)
        return [payload_to_chunk(payloads[i]) for i in chunk_ids if i in payloads]

    async def count(self, tenant_id: str | None = None) -> int:
        selector = build_filter(tenant_id) if tenant_id else None
        return await self._call("count", self._count(selector))  # type: ignore[arg-type]

    # -- snapshots -----------------------------------------------------------------------
    async def _snapshot_target(self) -> str:
        """The physical collection behind the alias (snapshots belong to a collection)."""
        if self.physical is None:
            self.physical = await self._call("alias lookup", self._alias_target())
        if self.physical is None:
            raise QdrantStoreError(f"no Qdrant collection behind the alias {self.alias}")
        return self.physical

    async def create_snapshot(self, name: str) -> dict[str, Any]:
        del name  # Qdrant names its snapshots itself
        if self.config.local_path:
            raise ConfigError("snapshots need a Qdrant server; qdrant-client local mode has none")
        collection = await self._snapshot_target()
        description = await self._call(
            "snapshot creation", self.client.create_snapshot(collection, wait=True)
        )
        return {"store": "qdrant", "name": description.name, "size": description.size}

    async def list_snapshots(self) -> list[dict[str, Any]]:
        if self.config.local_path:
            raise ConfigError("snapshots need a Qdrant server; qdrant-client local mode has none")
        collection = await self._snapshot_target()
        found = await self._call("snapshot listing", self.client.list_snapshots(collection))
        return [{"store": "qdrant", "name": s.name, "size": s.size} for s in found]


def payload_to_chunk(payload: dict[str, Any]) -> Chunk:
    return Chunk.model_construct(**{k: v for k, v in payload.items() if k not in _STORE_ONLY})
