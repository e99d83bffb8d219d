"""The store protocol the pipelines depend on, the value types that cross it, and the
primitives a store backend implements.

``ChunkIndex`` is what the pipelines see. Every topology is one ``StoreIndex``
(``stores/index.py``: the write, delete and read algorithm, once) over one or more
``Backend``\\ s: qdrant-edge in process, Qdrant, OpenSearch. A backend implements primitives
only (upsert points, delete by ids or documents, list a document's chunk ids, batch query,
retrieve, count); which strategies it serves and whether it holds the chunks' text are its
attributes. Topology modules are imported only when the configuration names them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from serve_app.registry import Registry
from serve_app.schemas import (
    DEFAULT_COLLECTION,
    Chunk,
    DocumentInfo,
    SearchFilters,
    SparseVector,
    Strategy,
    valid_collection_name,
    valid_tenant_id,
)

PAYLOAD_SCHEMA = 2
"""Version of the chunk payload layout (2: every chunk carries its ``collection``); recorded
with the models, so an index written with another layout is refused like other models."""

SCOPE_FIELDS = ["tenant_id", "collection"]
PAYLOAD_INDEXES = ("tenant_id", "collection", "doc_id", "section")
"""The payload fields every chunk store indexes for its filters (checked by ``validate``)."""


@dataclass(frozen=True, slots=True)
class ScopeKey:
    """What every store call is scoped by: one tenant and one of its collections, or every
    collection of the tenant (``collection`` None; inspection only).

    A structured value, not a string convention: both parts are checked on construction
    (``valid_tenant_id``, ``valid_collection_name``), and nothing parses a string into a scope,
    so no string (a token claim ``tenA/proj``, say) can address another tenant's collection.
    """

    tenant: str
    collection: str | None = DEFAULT_COLLECTION

    def __post_init__(self) -> None:
        valid_tenant_id(self.tenant)
        if self.collection is not None:
            valid_collection_name(self.collection)

    @property
    def is_default(self) -> bool:
        """Whether this is the tenant's ``default`` collection, which every tenant has (the
        one place that rule is written)."""
        return self.collection == DEFAULT_COLLECTION

    @property
    def every_collection(self) -> bool:
        return self.collection is None

    def __str__(self) -> str:
        """For logs and the chunk-id owner (``chunking.base.chunk_id``): the tenant for its
        ``default`` collection, ``tenant/collection`` otherwise, ``tenant/*`` for all. Neither
        part can hold a ``/``, so the text is unambiguous; it is never parsed back."""
        if self.is_default:
            return self.tenant
        return f"{self.tenant}/{self.collection or '*'}"


def payload_scope(payload: dict[str, Any]) -> ScopeKey:
    """The scope key of a stored chunk's payload."""
    return ScopeKey(payload["tenant_id"], payload.get("collection") or DEFAULT_COLLECTION)


def in_scope(payload: dict[str, Any], key: ScopeKey) -> bool:
    if payload.get("tenant_id") != key.tenant:
        return False
    return (
        key.every_collection or (payload.get("collection") or DEFAULT_COLLECTION) == key.collection
    )


def scope_payload(key: ScopeKey) -> dict[str, str]:
    """The scope fields a stored chunk's payload carries (``SCOPE_FIELDS``): a chunk itself
    carries no tenancy, its store scope does."""
    if key.collection is None:
        raise ValueError(f"a chunk is written to one collection, not to {key}")
    return {"tenant_id": key.tenant, "collection": key.collection}


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


def binding_changes(recorded: Any, configured: Any) -> str:
    """What differs between the binding an index recorded and the one configured now, each
    field named with both values (the model guard's message)."""
    if not isinstance(recorded, dict) or not isinstance(configured, dict):
        return f"recorded {recorded!r}, configured {configured!r}"
    changes = []
    for key in [*configured, *(k for k in recorded if k not in configured)]:
        old, new = recorded.get(key), configured.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            changes.append(binding_changes(old, new))
        else:
            changes.append(f"{key}: recorded {old!r}, configured {new!r}")
    return "; ".join(changes)


def unrecorded_revisions(recorded: Any, configured: Any) -> list[str] | None:
    """The ``*_revision`` fields ``configured`` has and ``recorded`` lacks (an index built
    before revisions were recorded), when that is all that differs; None when anything else
    differs (a recorded revision that differs included), ``[]`` when nothing does."""
    if recorded == configured:
        return []
    if not isinstance(recorded, dict) or not isinstance(configured, dict):
        return None
    missing: list[str] = []
    for key in [*configured, *(k for k in recorded if k not in configured)]:
        old, new = recorded.get(key), configured.get(key)
        if old == new:
            continue
        if key.endswith("_revision") and key not in recorded:
            missing.append(key)
            continue
        nested = unrecorded_revisions(old, new)
        if nested is None:
            return None
        missing.extend(nested)
    return missing


def revisions_warning(where: str, missing: list[str]) -> str:
    return (
        f"{where} recorded no {', '.join(missing)} (built before revisions were recorded): "
        "opened with the configured models, whose revisions it records from now on"
    )


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


@runtime_checkable
class ServingIndex(Protocol):
    """What the serving path calls: the batched search and fetch of a query, the named
    collection check done in the same call, and the writes, deletes and reads of ingest and
    the document routes. Every call is scoped to one tenant's collection (``ScopeKey``).

    A chunk is served (searched, fetched) only when every store of the topology holds it; a
    document counts as stored only when all its chunks are there under one content hash.
    Writes and deletes are safe to interrupt at any point (cancellation included):
    afterwards the old or the new version of each document is served, never a mix, and a
    retry converges."""

    strategies: tuple[Strategy, ...]

    async def open(self, models: IndexModels) -> None:
        """Create or open the index; refuse (ModelMismatchError) vectors from other models."""
        ...

    async def close(self) -> None: ...

    async def healthy(self) -> bool: ...

    async def write_documents(self, scope: ScopeKey, writes: list[DocumentWrite]) -> int:
        """Replace each document by its new chunks; returns the old chunks removed."""
        ...

    async def delete_document(self, scope: ScopeKey, doc_id: str) -> int: ...

    async def document_hashes(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, str]: ...

    async def document_info(self, scope: ScopeKey, doc_id: str) -> DocumentInfo | None: ...

    async def search_batch(self, queries: list[SearchQuery]) -> list[dict[str, list[Hit]]]:
        """Many queries (a coalesced batch) in one call per store."""
        ...

    async def fetch_batch(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[list[Chunk]]:
        """Per (scope, ids) request: the scope's chunks with these ids, in the order asked
        (unknown ids are skipped), in one call per store."""
        ...

    async def has_collection(self, key: ScopeKey) -> bool:
        """Whether the tenant has the collection, ready for use."""
        ...


@runtime_checkable
class CollectionRegistry(Protocol):
    """The named collections of each tenant (``default`` always exists)."""

    async def list_collections(self, tenant: ScopeKey) -> list[dict[str, Any]]:
        """The collections of ``tenant.tenant`` (its collection part is not used)."""
        ...

    async def has_collection(self, key: ScopeKey) -> bool: ...

    async def create_collection(self, key: ScopeKey) -> dict[str, Any]: ...

    async def delete_collection(self, key: ScopeKey) -> int:
        """Remove the collection and its chunks from every store; the chunks removed."""
        ...


@runtime_checkable
class IndexMaintenance(Protocol):
    """Inspection, counts and the one-query reads that evaluation, benchmarks and tests use
    (the serving path batches its queries: ``ServingIndex``)."""

    async def count(self, scope: ScopeKey | None = None) -> int: ...

    async def inspect(self, selector: ScopeKey | None = None) -> dict[str, Any]:
        """Each store's own report and, per (tenant, collection), the chunks and documents
        each store holds (every tenant when ``selector`` is None, every collection of its
        tenant when its collection is None)."""
        ...

    async def search(
        self,
        strategy: Strategy,
        query: QueryVectors,
        limit: int,
        scope: ScopeKey,
        filters: SearchFilters | None = None,
    ) -> list[Hit]: ...

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        scope: ScopeKey,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[Hit]]:
        """Every strategy for one query in one call per store."""
        ...

    async def fetch(self, scope: ScopeKey, chunk_ids: list[str]) -> list[Chunk]: ...


@runtime_checkable
class ChunkIndex(ServingIndex, CollectionRegistry, IndexMaintenance, Protocol):
    """A whole store topology (``StoreIndex``, or ``RemoteIndex`` over the store
    deployment): every protocol above. Callers take the narrowest one they need."""


@runtime_checkable
class Snapshots(Protocol):
    """A store that can snapshot itself (server stores)."""

    async def create_snapshot(self, name: str) -> dict[str, Any]: ...

    async def list_snapshots(self) -> list[dict[str, Any]]: ...


class Backend(Protocol):
    """The primitives of one store. ``holds_chunks``: its payloads carry the whole chunk, so
    fetch and document info read it; other backends only confirm that they hold an id."""

    name: str
    strategies: tuple[Strategy, ...]
    holds_chunks: bool

    async def open(self, models: IndexModels) -> None: ...

    async def attach(self) -> None:
        """Use the index as it is, whatever built it (inspection); NotFoundError when the
        store holds none, ServiceUnavailableError when it cannot be reached."""
        ...

    async def close(self) -> None: ...

    async def healthy(self) -> bool: ...

    async def upsert(self, scope: ScopeKey, writes: list[DocumentWrite]) -> None:
        """Every chunk of ``writes`` (payload with ``content_hash`` and ``chunk_count``),
        visible to reads when the call returns."""
        ...

    async def delete_ids(self, scope: ScopeKey, chunk_ids: list[str]) -> None: ...

    async def delete_documents(self, scope: ScopeKey, doc_ids: list[str]) -> int:
        """Every chunk of the documents; returns how many there were."""
        ...

    async def delete_scope(self, scope: ScopeKey) -> int:
        """Every chunk of the scope (a whole collection); returns how many there were."""
        ...

    async def chunk_ids(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, set[str]]:
        """doc id -> the ids of its chunks held here (documents with none are absent)."""
        ...

    async def document_states(self, scope: ScopeKey, doc_ids: list[str]) -> DocumentStates: ...

    async def query(self, queries: list[StrategyQuery]) -> list[list[Hit]]:
        """Hits per query, best first, in one round trip."""
        ...

    async def present(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[set[str]]:
        """Per (scope, ids) request: the ids held here in that scope."""
        ...

    async def count(self, scope: ScopeKey | None) -> int: ...

    async def scroll_payloads(
        self, scope: ScopeKey | None, fields: list[str] | None, offset: Any, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
        """A page of (chunk id, payload with ``fields``, or all of it for None) and the offset
        of the next page (None after the last); ``scope`` None pages through everything."""
        ...

    async def describe(self) -> dict[str, Any]:
        """What the store itself reports: ``store``, ``location``, ``alias``, ``physical``
        (the version behind the alias), ``versions``, ``binding`` (what it records about the
        models), ``points``, ``payload_indexes`` (field -> type), ``disk_bytes`` (None where
        the store does not report it)."""
        ...


class ChunkBackend(Backend, Protocol):
    """A backend whose payloads are whole chunks."""

    async def chunks(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[dict[str, Chunk]]:
        """Per (scope, ids) request: id -> chunk, for the ids held here in that scope."""
        ...

    async def document_payloads(self, scope: ScopeKey, doc_id: str) -> list[dict[str, Any]]:
        """The payloads of a document's chunks (id, order, title, metadata, source, hash)."""
        ...

    # The registry of named collections: one record per (tenant, collection) under
    # ``registry_key``, written with the store's own create-once / update-if-present / delete
    # operations, so store replicas changing it at once cannot lose each other's changes.
    async def open_registry(self) -> None:
        """Make sure the registry exists."""
        ...

    async def registry_records(self, tenant_id: str | None) -> list[dict[str, Any]]:
        """Every record (of one tenant, or all); [] when the registry does not exist."""
        ...

    async def registry_record(self, key: str) -> dict[str, Any] | None: ...

    async def insert_registry_record(self, key: str, record: dict[str, Any]) -> bool:
        """Create the record unless one exists under ``key``: True when this call created it
        (of concurrent inserts under one key, from any process, exactly one)."""
        ...

    async def update_registry_record(self, key: str, fields: dict[str, Any]) -> bool:
        """Change ``fields`` of the record if it exists (never re-creates one just dropped):
        True if so."""
        ...

    async def drop_registry_record(self, key: str) -> None: ...


TOPOLOGIES: Registry[ChunkIndex] = Registry("store topology", "stores.topology")
_STORES_EXTRA = "install the stores extra: pip install 'serve-app[stores]'"
TOPOLOGIES.register_lazy("embedded", "serve_app.stores.embedded:build_embedded")
TOPOLOGIES.register_lazy("qdrant", "serve_app.stores.qdrant_store:build_qdrant", _STORES_EXTRA)
TOPOLOGIES.register_lazy("opensearch+qdrant", "serve_app.stores.split:build_split", _STORES_EXTRA)


def document_info_from(
    scope: ScopeKey, doc_id: str, payloads: list[dict[str, Any]]
) -> DocumentInfo | None:
    """A document's info from its stored chunk payloads (any order); None when there are none."""
    if not payloads:
        return None
    ordered = sorted(payloads, key=lambda p: p["order"])
    first = ordered[0]
    return DocumentInfo(
        id=doc_id,
        tenant_id=scope.tenant,
        collection=scope.collection or DEFAULT_COLLECTION,
        title=first.get("title", ""),
        # imrad labels are per chunk (set by the chunker), not document metadata.
        metadata={k: v for k, v in first.get("metadata", {}).items() if k != "imrad"},
        source=first.get("source"),
        content_hash=first["content_hash"],
        chunk_ids=[p["id"] for p in ordered],
    )


def states_from_payloads(payloads: list[dict[str, Any]]) -> DocumentStates:
    """Document states from chunk payloads carrying doc_id, content_hash and chunk_count."""
    seen: dict[str, dict[str, list[int]]] = {}
    for payload in payloads:
        per_hash = seen.setdefault(payload["doc_id"], {})
        per_hash.setdefault(payload["content_hash"], []).append(int(payload["chunk_count"]))
    return {
        doc: (h, len(counts), max(counts))
        for doc, hashes in seen.items()
        if len(hashes) == 1
        for h, counts in hashes.items()
    }


def sample_payload(payload: dict[str, Any], max_chars: int = 80) -> dict[str, Any]:
    """A stored payload for display: long strings cut, large maps and lists summarised."""
    out: dict[str, Any] = {}
    for key, value in sorted(payload.items()):
        if isinstance(value, str) and len(value) > max_chars:
            value = value[:max_chars] + "..."
        elif isinstance(value, dict) and len(value) > 8:
            value = f"<{len(value)} entries>"
        elif isinstance(value, list) and len(value) > 8:
            value = f"<{len(value)} items>"
        out[key] = value
    return out


def directory_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it does not exist)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0
