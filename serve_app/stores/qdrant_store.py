"""Qdrant server backend (qdrant-client, async): dense vectors, and in the ``qdrant`` topology
SPLADE and BM25 sparse vectors too (BM25 with the IDF modifier, IDF from the scope's chunks).

``collection`` in config is an alias in front of ``{collection}-v{n}`` (stores/versioning.py);
the models that built the vectors are the collection's metadata. The same client runs against
qdrant-client's local mode (``local_path``), which speaks the same API with exact search and
no snapshots.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from serve_app.config import AppConfig, QdrantConfig
from serve_app.errors import ConfigError, NotFoundError, ServiceUnavailableError
from serve_app.schemas import Chunk, Strategy
from serve_app.stores import qdrant_requests as qr
from serve_app.stores.disk import directory_bytes
from serve_app.stores.index import StoreIndex
from serve_app.stores.payloads import states_from_payloads
from serve_app.stores.registry import registry_fields, registry_name
from serve_app.stores.scope import SCOPE_FIELDS, ScopeKey, in_scope
from serve_app.stores.values import (
    PAYLOAD_INDEXES,
    DocumentStates,
    DocumentWrite,
    Hit,
    IndexModels,
    StrategyQuery,
)
from serve_app.stores.versioning import VersionTaken, open_versioned, versioned_names

log = logging.getLogger(__name__)

_SCROLL_PAGE = 1000
_REGISTRY_PAGE = 1000
_ABSENT = object()
_INSERT_ONLY_SINCE = (1, 17)
# The registry decides who created a collection: with replicated shards, its writes are
# ordered through the shard's leader and its reads ask every replica.
_STRONG = qm.WriteOrdering.STRONG
_ALL = qm.ReadConsistencyType.ALL
_CLIENT_ERRORS = (UnexpectedResponse, ResponseHandlingException, httpx.HTTPError, OSError)


class QdrantStoreError(ServiceUnavailableError):
    """Qdrant refused or could not complete a request."""


# -- translation of the shared Qdrant requests into qdrant-client's models ----------------
def _condition(condition: qr.Condition) -> qm.FieldCondition:
    key, value = condition.key, condition.value
    if isinstance(value, list):
        return qm.FieldCondition(key=key, match=qm.MatchAny(any=value))
    if isinstance(value, float):
        return qm.FieldCondition(key=key, range=qm.Range(gte=value, lte=value))
    return qm.FieldCondition(key=key, match=qm.MatchValue(value=value))


def to_client_filter(spec: qr.Filter) -> qm.Filter:
    must_not: list[qm.Condition] | None = (
        [qm.HasIdCondition(has_id=list(spec.exclude_ids))] if spec.exclude_ids else None
    )
    return qm.Filter(must=[_condition(c) for c in spec.must], must_not=must_not)


class QdrantBackend:
    """Qdrant as the store for ``strategies``: ("dense",) or ("bm25", "splade", "dense")."""

    name = "qdrant"
    kind = "Qdrant collection"
    holds_chunks = True

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

    # -- versioned collection primitives (stores/versioning.py) -------------------------
    async def alias_target(self) -> str | None:
        response = await self.client.get_aliases()
        return next(
            (a.collection_name for a in response.aliases if a.alias_name == self.alias), None
        )

    async def version_names(self) -> list[str]:
        return [c.name for c in (await self.client.get_collections()).collections]

    def binding(self, models: IndexModels) -> dict[str, Any]:
        stored = models.as_dict()
        if "splade" not in self.strategies:
            stored["splade_model"] = None
        if "bm25" not in self.strategies:
            stored["bm25_model"] = None
        return stored

    async def stored_binding(self, name: str) -> Any:
        info = await self.client.get_collection(name)
        return (info.config.metadata or {}).get("models")

    async def record_binding(self, name: str, models: IndexModels) -> None:
        # Qdrant merges metadata keys: the strategies and the registry stay as they are.
        await self.client.update_collection(name, metadata={"models": self.binding(models)})

    async def create_version(self, name: str, models: IndexModels) -> None:
        quantization = (
            qm.ScalarQuantization(
                scalar=qm.ScalarQuantizationConfig(type=qm.ScalarType.INT8, always_ram=True)
            )
            if self.config.quantization == "int8"
            else None
        )
        sparse = {}
        if "splade" in self.strategies:
            sparse["splade"] = qm.SparseVectorParams()
        if "bm25" in self.strategies:
            sparse["bm25"] = qm.SparseVectorParams(modifier=qm.Modifier.IDF)
        try:
            await self._create_collection(name, models, sparse, quantization)
        except (UnexpectedResponse, ValueError) as error:
            if _already_exists(error, name):
                raise VersionTaken(name) from None
            raise

    async def prepare_version(self, name: str) -> None:
        if not self.config.local_path:  # local mode has no payload indexes (and warns)
            await self.client.create_payload_index(
                name,
                "tenant_id",
                qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True),
            )
            for field in (f for f in PAYLOAD_INDEXES if f != "tenant_id"):
                await self.client.create_payload_index(name, field, qm.PayloadSchemaType.KEYWORD)

    async def version_is_empty(self, name: str) -> bool:
        return (await self.client.count(name, exact=True)).count == 0

    async def _create_collection(
        self, name: str, models: IndexModels, sparse: dict[str, Any], quantization: Any
    ) -> None:
        await self.client.create_collection(
            name,
            vectors_config={
                "dense": qm.VectorParams(
                    size=models.dense_dim,
                    distance=qm.Distance.COSINE,
                    on_disk=self.config.on_disk,
                    hnsw_config=qm.HnswConfigDiff(
                        m=self.config.hnsw_m, ef_construct=self.config.hnsw_ef_construct
                    ),
                    quantization_config=quantization,
                )
            },
            sparse_vectors_config=sparse or None,
            shard_number=self.config.shard_number,
            replication_factor=self.config.replication_factor,
            metadata={"models": self.binding(models), "strategies": list(self.strategies)},
        )

    async def point_alias(self, name: str, previous: str | None) -> None:
        operations: list[Any] = []
        if previous is not None:
            operations.append(
                qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=self.alias))
            )
        operations.append(
            qm.CreateAliasOperation(
                create_alias=qm.CreateAlias(collection_name=name, alias_name=self.alias)
            )
        )
        await self.client.update_collection_aliases(change_aliases_operations=operations)

    # -- lifecycle -----------------------------------------------------------------------
    async def open(self, models: IndexModels) -> None:
        self.physical = await self._call("open", open_versioned(self, models, self.migrate))

    async def attach(self) -> None:
        self.physical = await self._call("alias lookup", self.alias_target())
        if self.physical is None:
            raise NotFoundError(
                f"no {self.kind} behind the alias {self.alias!r} (stores.qdrant.collection)"
            )

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
    def _point(self, scope: ScopeKey, write: DocumentWrite, encoded: Any) -> qm.PointStruct:
        vectors: dict[str, Any] = {
            name: qm.SparseVector(indices=value[0], values=value[1])
            if isinstance(value, tuple)
            else value
            for name, value in qr.point_vectors(encoded, self.strategies).items()
        }
        return qm.PointStruct(
            id=encoded.chunk.id, vector=vectors, payload=qr.point_payload(scope, write, encoded)
        )

    async def upsert(self, scope: ScopeKey, writes: list[DocumentWrite]) -> None:
        points = [self._point(scope, w, e) for w in writes for e in w.chunks]
        size = self.config.upsert_batch_size
        for start in range(0, len(points), size):
            await self._call(
                "write",
                self.client.upsert(self.alias, points=points[start : start + size], wait=True),
            )

    async def _delete_where(self, what: str, selector: qm.Filter) -> int:
        count = (
            await self._call(what, self.client.count(self.alias, count_filter=selector, exact=True))
        ).count
        if count:
            await self._call(
                what,
                self.client.delete(
                    self.alias, points_selector=qm.FilterSelector(filter=selector), wait=True
                ),
            )
        return int(count)

    async def delete_ids(self, scope: ScopeKey, chunk_ids: list[str]) -> None:
        selector = to_client_filter(qr.chunk_filter(scope))
        selector.must = [*(selector.must or []), qm.HasIdCondition(has_id=list(chunk_ids))]
        await self._delete_where("delete", selector)

    async def delete_documents(self, scope: ScopeKey, doc_ids: list[str]) -> int:
        return await self._delete_where(
            "delete", to_client_filter(qr.chunk_filter(scope, doc_ids=doc_ids))
        )

    # -- reads ---------------------------------------------------------------------------
    async def _scroll(
        self,
        selector: qr.Filter,
        fields: list[str] | bool,
        offset: Any = None,
        pages: int = 0,
        page_size: int = _SCROLL_PAGE,
    ) -> tuple[list[qm.Record], Any]:
        records: list[qm.Record] = []
        done = 0
        while True:
            page, offset = await self._call(
                "scroll",
                self.client.scroll(
                    self.alias,
                    scroll_filter=to_client_filter(selector),
                    limit=page_size,
                    offset=offset,
                    with_payload=fields,
                    with_vectors=False,
                ),
            )
            records.extend(page)
            done += 1
            if offset is None or not page or done == pages:
                return records, offset

    async def chunk_ids(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, set[str]]:
        if not doc_ids:
            return {}
        records, _ = await self._scroll(qr.chunk_filter(scope, doc_ids=doc_ids), ["doc_id"])
        held: dict[str, set[str]] = {}
        for record in records:
            held.setdefault((record.payload or {})["doc_id"], set()).add(str(record.id))
        return held

    async def document_states(self, scope: ScopeKey, doc_ids: list[str]) -> DocumentStates:
        if not doc_ids:
            return {}
        records, _ = await self._scroll(
            qr.chunk_filter(scope, doc_ids=doc_ids), ["doc_id", "content_hash", "chunk_count"]
        )
        return states_from_payloads([r.payload or {} for r in records])

    async def document_payloads(self, scope: ScopeKey, doc_id: str) -> list[dict[str, Any]]:
        records, _ = await self._scroll(qr.chunk_filter(scope, doc_ids=[doc_id]), True)
        return [{**(r.payload or {}), "id": str(r.id)} for r in records]

    def _request(self, plan: qr.QueryPlan) -> qm.QueryRequest:
        params: qm.SearchParams | None
        if isinstance(plan.search, qr.DenseSearch):
            vector: Any = plan.search.vector
            # Local mode always searches exactly and warns about index parameters.
            params = (
                None
                if self.config.local_path
                else qm.SearchParams(hnsw_ef=self.config.hnsw_ef, exact=self.config.exact)
            )
        else:
            vector = qm.SparseVector(indices=plan.search.indices, values=plan.search.values)
            params = (
                qm.SearchParams(
                    idf=qm.IdfCorpusParams(
                        corpus=to_client_filter(qr.chunk_filter(plan.search.idf_scope))
                    )
                )
                if plan.search.idf_scope is not None
                else None
            )
        return qm.QueryRequest(
            query=vector,
            using=plan.using,
            filter=to_client_filter(plan.filter),
            limit=plan.limit,
            params=params,
            with_payload=["doc_id"] if plan.with_doc_id else False,
        )

    async def query(self, queries: list[StrategyQuery]) -> list[list[Hit]]:
        for q in queries:
            if q.strategy not in self.strategies:
                raise ValueError(f"this Qdrant store does not serve the {q.strategy!r} strategy")
        plans = [qr.query_plan(q) for q in queries]
        runnable = [i for i, plan in enumerate(plans) if plan is not None]
        results: list[list[Hit]] = [[] for _ in queries]
        if not runnable:
            return results
        responses = await self._call(
            "search",
            self.client.query_batch_points(
                self.alias,
                requests=[self._request(plans[i]) for i in runnable],  # type: ignore[arg-type]
            ),
        )
        for i, response in zip(runnable, responses, strict=True):
            results[i] = [
                Hit(str(p.id), (p.payload or {}).get("doc_id", ""), float(p.score))
                for p in response.points
            ]
        return results

    async def _retrieve(
        self, requests: list[tuple[ScopeKey, list[str]]], fields: list[str] | bool
    ) -> list[dict[str, dict[str, Any]]]:
        wanted = list(dict.fromkeys(i for _, ids in requests for i in ids))
        if not wanted:
            return [{} for _ in requests]
        records = await self._call(
            "fetch",
            self.client.retrieve(self.alias, ids=wanted, with_payload=fields, with_vectors=False),
        )
        by_id = {str(r.id): r.payload or {} for r in records}
        return [
            {i: by_id[i] for i in ids if i in by_id and in_scope(by_id[i], key)}
            for key, ids in requests
        ]

    async def present(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[set[str]]:
        return [set(found) for found in await self._retrieve(requests, SCOPE_FIELDS)]

    async def chunks(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[dict[str, Chunk]]:
        found = await self._retrieve(requests, True)
        return [{i: qr.payload_to_chunk(p) for i, p in f.items()} for f in found]

    async def count(self, scope: ScopeKey | None) -> int:
        selector = to_client_filter(qr.chunk_filter(scope)) if scope else None
        response = await self._call(
            "count", self.client.count(self.alias, count_filter=selector, exact=True)
        )
        return int(response.count)

    async def scroll_payloads(
        self, scope: ScopeKey | None, fields: list[str] | None, offset: Any, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
        records, offset = await self._scroll(
            qr.chunk_filter(scope), fields if fields is not None else True, offset, 1, limit
        )
        return [(str(r.id), r.payload or {}) for r in records], offset

    async def delete_scope(self, scope: ScopeKey) -> int:
        return await self._delete_where("delete", to_client_filter(qr.chunk_filter(scope)))

    # -- inspection and the collection registry (in the collection's metadata) -----------
    async def describe(self) -> dict[str, Any]:
        physical = await self._call("alias lookup", self.alias_target())
        versions = versioned_names(self.alias, await self._call("listing", self.version_names()))
        info = await self._call("collection info", self.client.get_collection(self.alias))
        disk = None
        if self.config.local_path and self.config.local_path != ":memory:":
            disk = directory_bytes(self.data_path / self.config.local_path)
        return {
            "store": self.name,
            "location": self.config.url or f"local mode: {self.config.local_path}",
            "alias": self.alias,
            "physical": physical,
            "versions": versions,
            "binding": (info.config.metadata or {}).get("models"),
            "points": info.points_count,
            "status": str(info.status.value if hasattr(info.status, "value") else info.status),
            "vectors": sorted((info.config.params.vectors or {}).keys())
            + sorted((info.config.params.sparse_vectors or {}).keys()),
            "payload_indexes": {
                name: str(getattr(schema.data_type, "value", schema.data_type))
                for name, schema in sorted((info.payload_schema or {}).items())
            },
            "disk_bytes": disk,  # a server does not report it through the collection API
        }

    # -- the collection registry (a collection of its own beside the alias) --------------
    @property
    def registry_collection(self) -> str:
        return registry_name(self.alias)

    async def _registry_call(self, what: str, coro: Any) -> Any:
        """The call's answer; ``_ABSENT`` when the point (set_payload) or the registry
        collection (an index opened by an earlier version) does not exist."""

        async def answer() -> Any:
            try:
                return await coro
            except UnexpectedResponse as error:
                if error.status_code == 404:
                    return _ABSENT
                raise
            except KeyError:  # local mode: no such point
                return _ABSENT
            except ValueError as error:  # local mode: no such collection
                if f"Collection {self.registry_collection} not found" in str(error):
                    return _ABSENT
                raise

        return await self._call(f"registry {what}", answer())

    async def open_registry(self) -> None:
        if not self.config.local_path:
            await self._require_insert_only()
        name = self.registry_collection
        if not await self._call("registry lookup", self.client.collection_exists(name)):
            await self._call("registry creation", self._create_registry(name))

    async def _require_insert_only(self) -> None:
        """Refuse a server that would ignore ``update_mode`` (older than 1.17): there a
        second creation of a collection would overwrite its record, not be refused."""
        version = (await self._call("version check", self.client.info())).version
        numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:2])
        if numbers < _INSERT_ONLY_SINCE:
            raise ConfigError(
                f"Qdrant {version} is too old for the named-collection registry, which needs "
                "upsert's update_mode (Qdrant >= 1.17); upgrade the server"
            )

    async def _create_registry(self, name: str) -> None:
        try:  # points with a payload only: no vectors
            await self.client.create_collection(
                name, vectors_config={}, replication_factor=self.config.replication_factor
            )
        except (UnexpectedResponse, ValueError) as error:
            if not _already_exists(error, name):
                raise
            return  # another replica created it meanwhile
        if not self.config.local_path:  # listings filter on the tenant (strict mode: indexed)
            await self.client.create_payload_index(name, "tenant_id", qm.PayloadSchemaType.KEYWORD)

    async def registry_records(self, tenant_id: str | None) -> list[dict[str, Any]]:
        selector = (
            qm.Filter(
                must=[qm.FieldCondition(key="tenant_id", match=qm.MatchValue(value=tenant_id))]
            )
            if tenant_id is not None
            else None
        )
        records: list[dict[str, Any]] = []
        offset: Any = None
        while True:
            page = await self._registry_call(
                "read",
                self.client.scroll(
                    self.registry_collection,
                    scroll_filter=selector,
                    limit=_REGISTRY_PAGE,
                    offset=offset,
                    with_payload=True,
                    consistency=_ALL,
                ),
            )
            if page is _ABSENT:
                return []
            points, offset = page
            records += [registry_fields(p.payload or {}) for p in points]
            if offset is None:
                return records

    async def _registry_payload(self, key: str) -> dict[str, Any] | None:
        found = await self._registry_call(
            "read",
            self.client.retrieve(
                self.registry_collection, ids=[key], with_payload=True, consistency=_ALL
            ),
        )
        return None if found is _ABSENT or not found else dict(found[0].payload or {})

    async def registry_record(self, key: str) -> dict[str, Any] | None:
        payload = await self._registry_payload(key)
        return None if payload is None else registry_fields(payload)

    async def insert_registry_record(self, key: str, record: dict[str, Any]) -> bool:
        # insert_only (Qdrant >= 1.17) leaves a point that exists as it is and reports success
        # either way: whether this call created it is read back from its claim.
        claim = uuid.uuid4().hex
        point = qm.PointStruct(
            id=key, vector={}, payload={**registry_fields(record), "claim": claim}
        )
        await self._call(
            "registry write",
            self.client.upsert(
                self.registry_collection,
                [point],
                update_mode=qm.UpdateMode.INSERT_ONLY,
                ordering=_STRONG,
            ),
        )
        held = await self._registry_payload(key)
        return held is not None and held.get("claim") == claim

    async def update_registry_record(self, key: str, fields: dict[str, Any]) -> bool:
        # set_payload on an absent point is refused (404), never an insert; it merges, so
        # the creator's claim stays.
        updated = await self._registry_call(
            "write",
            self.client.set_payload(
                self.registry_collection,
                payload=registry_fields(fields),
                points=[key],
                ordering=_STRONG,
            ),
        )
        return updated is not _ABSENT

    async def drop_registry_record(self, key: str) -> None:
        await self._registry_call(
            "write",
            self.client.delete(
                self.registry_collection,
                points_selector=qm.PointIdsList(points=[key]),
                ordering=_STRONG,
            ),
        )

    # -- snapshots (Snapshots protocol) ----------------------------------------------------
    async def _snapshot_target(self) -> str:
        """The physical collection behind the alias (snapshots belong to a collection)."""
        if self.config.local_path:
            raise ConfigError("snapshots need a Qdrant server; qdrant-client local mode has none")
        if self.physical is None:
            self.physical = await self._call("alias lookup", self.alias_target())
        if self.physical is None:
            raise QdrantStoreError(f"no Qdrant collection behind the alias {self.alias}")
        return self.physical

    async def _snapshot_collections(self) -> list[str]:
        """The chunk collection and, where it exists, the registry: restore both together."""
        collections = [await self._snapshot_target()]
        registry = self.registry_collection
        if await self._call("registry lookup", self.client.collection_exists(registry)):
            collections.append(registry)
        return collections

    async def create_snapshot(self, name: str) -> dict[str, Any]:
        del name  # Qdrant names its snapshots itself
        collections = await self._snapshot_collections()
        taken = [
            await self._call("snapshot creation", self.client.create_snapshot(c, wait=True))
            for c in collections
        ]
        answer = {"store": "qdrant", "name": taken[0].name, "size": taken[0].size}
        if len(taken) > 1:
            answer["registry_snapshot"] = taken[1].name
        return answer

    async def list_snapshots(self) -> list[dict[str, Any]]:
        found = []
        for collection in await self._snapshot_collections():
            listed = await self._call("snapshot listing", self.client.list_snapshots(collection))
            found += [
                {"store": "qdrant", "collection": collection, "name": s.name, "size": s.size}
                for s in listed
            ]
        return found


def _already_exists(error: Exception, name: str) -> bool:
    """Whether a collection creation failed because ``name`` exists: 409 since Qdrant 1.8,
    400 with this text before; local mode raises a ValueError."""
    if isinstance(error, UnexpectedResponse):
        return error.status_code == 409 or b"already exists" in (error.content or b"")
    return f"Collection {name} already exists" in str(error)


def build_qdrant(config: AppConfig) -> StoreIndex:
    return StoreIndex(
        [
            QdrantBackend(
                config.stores.qdrant,
                config.data_path,
                strategies=tuple(config.enabled_strategies()),
                migrate=config.stores.migrate,
            )
        ]
    )
