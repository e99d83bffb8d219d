"""The embedded store: Qdrant's engine in process (qdrant-edge), one shard for all strategies.

Named vectors: ``dense`` (cosine, HNSW), ``splade`` (sparse dot product) and ``bm25``
(sparse, IDF modifier: the engine keeps document frequencies and applies IDF at query time).
Payload indexes on tenant_id, doc_id and section. One process owns a shard directory. A
batch of queries (``query``) or fetches (``present``/``chunks``) is one engine call.

The engine's Python binding holds the GIL for the whole of each call (docs/benchmarks.md:
beside back-to-back searches or fetches, another thread of the process that ticks every
millisecond gets about one tick in per call, between calls). A worker thread
therefore buys those calls no concurrency, only two hand-offs per call, each of which waits
for the GIL behind Ray's own threads in a Serve replica: the search path's calls (``query``,
``present``, ``chunks``) run inline on the caller's event loop, which they would stall
just the same from a thread. Writes, scrolls and the rest keep their worker thread (writes
serialise on a lock of their own there).

qdrant-edge has no background optimizer: what its writes leave unoptimized stays so (the
SciFact index ``serve-app eval`` writes is one appendable segment, where dense search scans
every vector) until ``EdgeShard.optimize()`` builds the HNSW graph. That call holds the GIL
for its whole run (docs/benchmarks.md, measured on that index: another thread of the
process held up 2.3-3.4 s), so it would stall every search of a serving replica; the store
runs it when it opens an existing index, before it serves.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterable
from functools import partial
from itertools import repeat
from pathlib import Path
from typing import Any, cast

import qdrant_edge as edge

from serve_app.config import AppConfig, EmbeddedStoreConfig
from serve_app.errors import (
    ModelMismatchError,
    NotFoundError,
    ServiceUnavailableError,
    StoreUnavailableError,
)
from serve_app.schemas import Chunk, Strategy
from serve_app.stores import qdrant_requests as qr
from serve_app.stores.binding import binding_changes, revisions_warning, unrecorded_revisions
from serve_app.stores.disk import directory_bytes
from serve_app.stores.index import StoreIndex
from serve_app.stores.ownership import IndexOwnership
from serve_app.stores.payloads import states_from_payloads
from serve_app.stores.registry import registry_fields, registry_key
from serve_app.stores.scope import SCOPE_FIELDS, ScopeKey, in_scope
from serve_app.stores.values import (
    PAYLOAD_INDEXES,
    DocumentStates,
    DocumentWrite,
    Hit,
    IndexModels,
    StrategyQuery,
)

log = logging.getLogger(__name__)

META_FILE = "index_meta.json"
RESTORE_ASIDE = ".restore-previous"  # the old index while a restore moves the new one in
REGISTRY_FILE = "collections.json"
SHARD_DIR = "shard"
_SCROLL_PAGE = 1000
_new_hit = partial(tuple.__new__, Hit)  # a Hit from a (chunk_id, doc_id, score) tuple


# -- translation of the shared Qdrant requests into qdrant-edge's object model ------------
def _condition(condition: qr.Condition) -> edge.FieldCondition:
    key, value = condition.key, condition.value
    if isinstance(value, list):
        return edge.FieldCondition(key=key, match=edge.MatchAny(value))
    if isinstance(value, float):
        return edge.FieldCondition(key=key, range=edge.RangeFloat(gte=value, lte=value))
    return edge.FieldCondition(key=key, match=edge.MatchValue(value))


def to_edge_filter(spec: qr.Filter) -> edge.Filter:
    must_not: list[Any] | None = (
        [edge.HasIdCondition(set(spec.exclude_ids))] if spec.exclude_ids else None
    )
    return edge.Filter(must=[_condition(c) for c in spec.must], must_not=must_not)


def _sparse(indices: list[int], values: list[float]) -> edge.SparseVector:
    return edge.SparseVector(indices=indices, values=values)


def _load_optimized(shard_path: Path) -> edge.EdgeShard:
    """Load a shard and build what its writes left unindexed (see the module's docstring)."""
    shard = edge.EdgeShard.load(str(shard_path))
    shard.optimize()
    return shard


class IdTexts:
    """The text of the engine's point ids, each formatted once.

    The engine hands every id back as a ``uuid.UUID``, and a search returns up to
    ``candidates`` ids per strategy per query, most of them seen before: formatting each one
    anew cost more than the engine's search itself (docs/benchmarks.md). Keyed by
    the UUID's integer (hashed in C); emptied once it holds ``limit`` ids, so it stays a
    few tens of MB whatever the index holds."""

    def __init__(self, limit: int = 1 << 18) -> None:
        self.limit = limit
        self._texts: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._texts)

    def __call__(self, point_id: Any) -> str:
        key = getattr(point_id, "int", None)
        if key is None:  # an integer or text id: nothing to save
            return str(point_id)
        text = self._texts.get(key)
        if text is None:
            if len(self._texts) >= self.limit:
                self._texts.clear()
            text = self._texts[key] = str(point_id)
        return text

    def many(self, point_ids: list[Any]) -> list[str]:
        """``[self(i) for i in point_ids]``, with one lookup per id, in a comprehension, when
        all are ``uuid.UUID``s seen before (the search path under load)."""
        get = self._texts.get
        try:
            texts = [get(point_id.int) for point_id in point_ids]
        except AttributeError:  # an integer or text id among them
            return [self(point_id) for point_id in point_ids]
        if None in texts:
            return [self(point_id) for point_id in point_ids]
        return cast(list[str], texts)


class EdgeBackend:
    """qdrant-edge primitives for every strategy; its payloads are whole chunks."""

    name = "qdrant-edge"
    strategies: tuple[Strategy, ...] = ("bm25", "splade", "dense")
    holds_chunks = True

    def __init__(self, path: str | Path, config: EmbeddedStoreConfig) -> None:
        self.path = Path(path)
        self.config = config
        self._shard: edge.EdgeShard | None = None
        self._write_lock = threading.Lock()
        self._id_text = IdTexts()
        self._ownership = IndexOwnership(self.path)
        self._write_failure: str | None = None

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
        self._ownership.acquire()  # before reading a file of the index: see stores.ownership
        try:
            self._open_owned(models)
        except BaseException:
            self._shard = None
            self._ownership.release()
            raise

    def _open_owned(self, models: IndexModels) -> None:
        meta_path = self.path / META_FILE
        if not meta_path.exists() and (self.path / RESTORE_ASIDE).exists():
            raise ServiceUnavailableError(
                f"a restore into {self.path} was interrupted: the previous index is in "
                f"{self.path / RESTORE_ASIDE}; move its entries back (or run the restore again "
                "after deleting it)"
            )
        if meta_path.exists():
            stored = json.loads(meta_path.read_text())
            missing = unrecorded_revisions(stored, models.as_dict())
            if missing:  # recorded below, with the rest of the binding
                log.warning(revisions_warning(f"the index at {self.path}", missing))
            elif missing is None:
                raise ModelMismatchError(
                    f"the index at {self.path} was built with other models "
                    f"({binding_changes(stored, models.as_dict())}); configure the models it "
                    "was built with, or re-index into a new stores.embedded.path (or delete "
                    "the old index to rebuild it)"
                )
        shard_path = self.path / SHARD_DIR
        try:
            if (shard_path / "segments").exists() or any(shard_path.glob("*")):
                self._shard = _load_optimized(shard_path)
            else:
                self._shard = edge.EdgeShard.create(str(shard_path), self._edge_config(models))
                for field in PAYLOAD_INDEXES:
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

    async def open(self, models: IndexModels) -> None:
        await asyncio.to_thread(self._open_sync, models)

    def _attach_sync(self) -> None:
        shard_path = self.path / SHARD_DIR
        if not (self.path / META_FILE).exists() or not shard_path.is_dir():
            raise NotFoundError(f"no embedded index at {self.path} (stores.embedded.path)")
        self._ownership.acquire()
        try:
            self._shard = _load_optimized(shard_path)
        except Exception as error:
            self._ownership.release()
            raise ServiceUnavailableError(
                f"cannot open the embedded index at {shard_path}: {error}"
            ) from None

    async def attach(self) -> None:
        await asyncio.to_thread(self._attach_sync)

    @property
    def shard(self) -> edge.EdgeShard:
        if self._shard is None:
            raise ServiceUnavailableError("the embedded index is not open")
        return self._shard

    def _close_sync(self) -> None:
        with self._write_lock:
            try:
                if self._shard is not None:
                    self._shard.flush()
                    self._shard.close()
            except Exception as error:  # a broken engine still lets go of the index
                log.warning("closing the embedded index at %s: %s", self.path, error)
            finally:
                self._shard = None
                self._ownership.release()

    async def close(self) -> None:
        await asyncio.to_thread(self._close_sync)

    async def healthy(self) -> bool:
        """Open, and its last write went through: an engine that refused a write (its files
        changed under it, a full disk) is not ready until a write succeeds again."""
        return self._shard is not None and self._write_failure is None

    # -- writes --------------------------------------------------------------------------
    def _engine_write(self, write: Any) -> Any:
        """``write()`` under the write lock; an engine error becomes STORE_UNAVAILABLE (503,
        readiness failing), not an internal error."""
        shard = self.shard
        with self._write_lock:
            try:
                result = write(shard)
                shard.flush()
            except Exception as error:
                self._write_failure = str(error)
                raise StoreUnavailableError(
                    f"the embedded index at {self.path} refused a write: {error}"
                ) from None
        self._write_failure = None
        return result

    def _update(self, operation: edge.UpdateOperation) -> None:
        self._engine_write(lambda shard: shard.update(operation))

    def _upsert_sync(self, scope: ScopeKey, writes: list[DocumentWrite]) -> None:
        points = []
        for write in writes:
            for encoded in write.chunks:
                vectors = qr.point_vectors(encoded, self.strategies)
                vector: dict[str, Any] = {
                    name: _sparse(*value) if isinstance(value, tuple) else value
                    for name, value in vectors.items()
                }
                points.append(
                    edge.Point(encoded.chunk.id, vector, qr.point_payload(scope, write, encoded))
                )
        if points:
            self._update(edge.UpdateOperation.upsert_points(points))

    async def upsert(self, scope: ScopeKey, writes: list[DocumentWrite]) -> None:
        await asyncio.to_thread(self._upsert_sync, scope, writes)

    async def delete_ids(self, scope: ScopeKey, chunk_ids: list[str]) -> None:
        selector = qr.chunk_filter(scope)
        spec = edge.Filter(
            must=[edge.HasIdCondition(set(chunk_ids)), *(to_edge_filter(selector).must or [])]
        )
        await asyncio.to_thread(self._update, edge.UpdateOperation.delete_points_by_filter(spec))

    def _delete_documents_sync(self, scope: ScopeKey, doc_ids: list[str]) -> int:
        return self._delete_where_sync(qr.chunk_filter(scope, doc_ids=doc_ids))

    def _delete_where_sync(self, spec: qr.Filter) -> int:
        selector = to_edge_filter(spec)

        def delete(shard: edge.EdgeShard) -> int:
            count = shard.count(edge.CountRequest(exact=True, filter=selector))
            if count:
                shard.update(edge.UpdateOperation.delete_points_by_filter(selector))
            return count

        return int(self._engine_write(delete))

    async def delete_documents(self, scope: ScopeKey, doc_ids: list[str]) -> int:
        return await asyncio.to_thread(self._delete_documents_sync, scope, doc_ids)

    # -- reads ---------------------------------------------------------------------------
    def _scroll(
        self,
        selector: qr.Filter,
        fields: list[str] | None,
        offset: Any = None,
        pages: int = 0,
        page_size: int = _SCROLL_PAGE,
    ) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
        """(id, payload) of every match, or of ``pages`` pages from ``offset``."""
        found: list[tuple[str, dict[str, Any]]] = []
        with_payload = edge.PayloadSelector.Include(fields) if fields else True
        done = 0
        while True:
            records, offset = self.shard.scroll(
                edge.ScrollRequest(
                    offset=offset,
                    limit=page_size,
                    filter=to_edge_filter(selector),
                    with_payload=with_payload,
                )
            )
            found.extend((str(r.id), dict(r.payload or {})) for r in records)
            done += 1
            if offset is None or not records or done == pages:
                return found, offset

    def _chunk_ids_sync(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, set[str]]:
        held: dict[str, set[str]] = {}
        records, _ = self._scroll(qr.chunk_filter(scope, doc_ids=doc_ids), ["doc_id"])
        for chunk_id, payload in records:
            held.setdefault(payload["doc_id"], set()).add(chunk_id)
        return held

    async def chunk_ids(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, set[str]]:
        if not doc_ids:
            return {}
        return await asyncio.to_thread(self._chunk_ids_sync, scope, doc_ids)

    def _states_sync(self, scope: ScopeKey, doc_ids: list[str]) -> DocumentStates:
        records, _ = self._scroll(
            qr.chunk_filter(scope, doc_ids=doc_ids), ["doc_id", "content_hash", "chunk_count"]
        )
        return states_from_payloads([p for _, p in records])

    async def document_states(self, scope: ScopeKey, doc_ids: list[str]) -> DocumentStates:
        if not doc_ids:
            return {}
        return await asyncio.to_thread(self._states_sync, scope, doc_ids)

    async def document_payloads(self, scope: ScopeKey, doc_id: str) -> list[dict[str, Any]]:
        records, _ = await asyncio.to_thread(
            self._scroll, qr.chunk_filter(scope, doc_ids=[doc_id]), None
        )
        return [payload for _, payload in records]

    def _request(self, plan: qr.QueryPlan) -> edge.QueryRequest:
        if isinstance(plan.search, qr.DenseSearch):
            vector: Any = plan.search.vector
            params: edge.SearchParams | None = edge.SearchParams(
                hnsw_ef=self.config.hnsw_ef, exact=self.config.exact
            )
        else:
            vector = _sparse(plan.search.indices, plan.search.values)
            params = (
                edge.SearchParams(
                    idf=edge.IdfParams(
                        corpus=to_edge_filter(qr.chunk_filter(plan.search.idf_scope))
                    )
                )
                if plan.search.idf_scope is not None
                else None
            )
        return edge.QueryRequest(
            limit=plan.limit,
            query=edge.Query.Nearest(vector, using=plan.using),
            filter=to_edge_filter(plan.filter),
            with_payload=edge.PayloadSelector.Include(["doc_id"]) if plan.with_doc_id else False,
            params=params,
        )

    def _query_sync(self, queries: list[StrategyQuery]) -> list[list[Hit]]:
        plans = [qr.query_plan(q) for q in queries]
        runnable = [i for i, plan in enumerate(plans) if plan is not None]
        results: list[list[Hit]] = [[] for _ in queries]
        if runnable:
            batch = self.shard.query_batch(
                edge.QueryBatchRequest([self._request(plans[i]) for i in runnable])  # type: ignore[arg-type]
            )
            for i, points in zip(runnable, batch, strict=True):
                results[i] = self._hits(points, plans[i].with_doc_id)  # type: ignore[union-attr]
        return results

    def _hits(self, points: list[Any], with_doc_id: bool) -> list[Hit]:
        # Column by column: each attribute read crosses into the engine's binding, and a search
        # reads up to ``candidates`` hits per strategy per query (docs/benchmarks.md).
        ids = self._id_text.many([p.id for p in points])
        scores = [p.score for p in points]
        doc_ids: Iterable[str] = (
            [p.payload["doc_id"] if p.payload else "" for p in points]
            if with_doc_id
            else repeat("")
        )
        return list(map(_new_hit, zip(ids, doc_ids, scores, strict=False)))  # repeat("")

    async def query(self, queries: list[StrategyQuery]) -> list[list[Hit]]:
        return self._query_sync(queries)  # inline: see the module's docstring

    def _retrieve_sync(
        self, requests: list[tuple[ScopeKey, list[str]]], fields: list[str] | bool
    ) -> list[dict[str, dict[str, Any]]]:
        wanted: list[Any] = list(dict.fromkeys(i for _, ids in requests for i in ids))
        if not wanted:
            return [{} for _ in requests]
        payload: Any = edge.PayloadSelector.Include(fields) if isinstance(fields, list) else True
        records = self.shard.retrieve(wanted, with_payload=payload, with_vector=False)
        by_id = {self._id_text(r.id): dict(r.payload or {}) for r in records}
        return [
            {i: by_id[i] for i in ids if i in by_id and in_scope(by_id[i], key)}
            for key, ids in requests
        ]

    async def present(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[set[str]]:
        found = self._retrieve_sync(requests, SCOPE_FIELDS)  # inline, as ``query``
        return [set(f) for f in found]

    async def chunks(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[dict[str, Chunk]]:
        found = self._retrieve_sync(requests, True)  # inline, as ``query``
        return [{i: qr.payload_to_chunk(p) for i, p in f.items()} for f in found]

    async def count(self, scope: ScopeKey | None) -> int:
        selector = to_edge_filter(qr.chunk_filter(scope)) if scope else None
        return await asyncio.to_thread(
            self.shard.count, edge.CountRequest(exact=True, filter=selector)
        )

    async def scroll_payloads(
        self, scope: ScopeKey | None, fields: list[str] | None, offset: Any, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
        return await asyncio.to_thread(
            self._scroll, qr.chunk_filter(scope), fields, offset, 1, limit
        )

    async def delete_scope(self, scope: ScopeKey) -> int:
        return await asyncio.to_thread(self._delete_where_sync, qr.chunk_filter(scope))

    # -- inspection and the collection registry --------------------------------------------
    def _describe_sync(self) -> dict[str, Any]:
        info = self.shard.info()
        meta_path = self.path / META_FILE
        return {
            "store": self.name,
            "location": str(self.path),
            "alias": None,
            "physical": SHARD_DIR,
            "versions": [SHARD_DIR],
            "binding": json.loads(meta_path.read_text()) if meta_path.exists() else None,
            "points": info.points_count,
            "segments": info.segments_count,
            "payload_indexes": {
                name: str(index.data_type).rsplit(".", 1)[-1].lower()
                for name, index in sorted(info.payload_schema.items())
            },
            "disk_bytes": directory_bytes(self.path),
        }

    async def describe(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._describe_sync)

    # The registry: one file beside the shard, which one process holds. Each operation
    # reads, changes and replaces it with no await in between, so it is atomic in that
    # process; the file keeps the layout it always had ({"tenants": {tenant: {name: record}}}).
    def _load_registry(self) -> dict[str, Any]:
        path = self.path / REGISTRY_FILE
        return json.loads(path.read_text()) if path.exists() else {}

    def _save_registry(self, registry: dict[str, Any]) -> None:
        path = self.path / REGISTRY_FILE
        staged = path.with_suffix(".tmp")
        staged.write_text(json.dumps(registry, indent=2, sort_keys=True))
        staged.replace(path)  # atomic: a crash leaves the old registry or the new one

    def _records(self) -> dict[str, dict[str, Any]]:
        return {
            registry_key(ScopeKey(r["tenant_id"], r["name"])): r
            for r in _file_records(self._load_registry())
        }

    def _put_record(self, record: dict[str, Any] | None, key: str) -> None:
        registry = self._load_registry()
        tenants = registry.setdefault("tenants", {})
        for tenant, names in list(tenants.items()):
            for name in list(names):
                if registry_key(ScopeKey(tenant, name)) == key:
                    del names[name]
            if not names:
                del tenants[tenant]
        if record is not None:
            fields = {k: v for k, v in record.items() if k not in ("tenant_id", "name")}
            tenants.setdefault(record["tenant_id"], {})[record["name"]] = fields
        self._save_registry(registry)

    async def open_registry(self) -> None:
        return None  # the file is the registry, written on the first change

    async def registry_records(self, tenant_id: str | None) -> list[dict[str, Any]]:
        records = self._records().values()
        return [r for r in records if tenant_id is None or r["tenant_id"] == tenant_id]

    async def registry_record(self, key: str) -> dict[str, Any] | None:
        return self._records().get(key)

    async def insert_registry_record(self, key: str, record: dict[str, Any]) -> bool:
        if key in self._records():
            return False
        self._put_record(record, key)
        return True

    async def update_registry_record(self, key: str, fields: dict[str, Any]) -> bool:
        held = self._records().get(key)
        if held is None:
            return False
        self._put_record({**held, **registry_fields(fields)}, key)
        return True

    async def drop_registry_record(self, key: str) -> None:
        self._put_record(None, key)


def _file_records(registry: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of the registry file (``{"tenants": {tenant: {name: fields}}}``)."""
    return [
        registry_fields({**record, "tenant_id": tenant, "name": name})
        for tenant, names in registry.get("tenants", {}).items()
        for name, record in names.items()
    ]


def embedded_index(path: str | Path, config: EmbeddedStoreConfig) -> StoreIndex:
    """The embedded topology over the shard directory ``path``."""
    return StoreIndex([EdgeBackend(path, config)])


def build_embedded(config: AppConfig) -> StoreIndex:
    return embedded_index(config.data_path / config.stores.embedded.path, config.stores.embedded)
