"""The store protocols: what the pipelines and the other callers see (``ServingIndex``,
``CollectionRegistry``, ``IndexReport``, which together are ``ServedIndex``, what the service
calls; ``IndexMaintenance``; ``ChunkIndex``, all of them; ``Snapshots``), and the primitives a store backend implements (``Backend``, ``ChunkBackend``).

Every topology is one ``StoreIndex`` (``stores/index/``: the write, delete and read algorithm,
once) over one or more ``Backend``\\ s: qdrant-edge in process, Qdrant, OpenSearch. A backend
implements primitives only (upsert points, delete by ids or documents, list a document's chunk
ids, batch query, retrieve, count); which strategies it serves and whether it holds the
chunks' text are its attributes.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from serve_app.schemas import (
    Chunk,
    DocumentInfo,
    DocumentPage,
    ScopeKey,
    SearchFilters,
    Strategy,
)
from serve_app.stores.values import (
    DocumentStates,
    DocumentWrite,
    Hit,
    IndexModels,
    QueryVectors,
    SearchQuery,
    StrategyQuery,
)


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

    async def list_documents(self, scope: ScopeKey, cursor: str | None, limit: int) -> DocumentPage:
        """Up to ``limit`` of the scope's stored documents from ``cursor`` (None: the first)."""
        ...

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
class IndexReport(Protocol):
    """What the stores hold, as the API and the CLI report it."""

    async def count(self, scope: ScopeKey | None = None) -> int: ...

    async def inspect(self, selector: ScopeKey | None = None) -> dict[str, Any]:
        """Each store's own report and, per (tenant, collection), the chunks and documents
        each store holds (every tenant when ``selector`` is None, every collection of its
        tenant when its collection is None)."""
        ...


@runtime_checkable
class ServedIndex(ServingIndex, CollectionRegistry, IndexReport, Protocol):
    """Everything the application service calls: what crosses the Ray seam between the
    ingress and the store deployment (``deployments/replicas/store_seam.py``)."""


@runtime_checkable
class IndexMaintenance(Protocol):
    """The one-query reads that evaluation, benchmarks and tests use, in process only (the
    serving path batches its queries: ``ServingIndex``)."""

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
class ChunkIndex(ServedIndex, IndexMaintenance, Protocol):
    """A whole store topology in process (``StoreIndex``): every protocol above. Callers
    take the narrowest one they need; across the Ray seam only ``ServedIndex`` goes."""


@runtime_checkable
class Snapshots(Protocol):
    """A store that can snapshot itself (server stores)."""

    async def create_snapshot(self, name: str) -> dict[str, Any]: ...

    async def list_snapshots(self) -> list[dict[str, Any]]: ...


# A backend is composed of collaborators that each take the store's connection, one per part
# below (``stores/composed.py``: ``ComposedBackend``); the parts are the protocols they meet.


class StoreConnection(Protocol):
    """The connection to one store and the index's lifecycle."""

    name: str
    strategies: tuple[Strategy, ...]

    async def open(self, models: IndexModels) -> None: ...

    async def attach(self) -> None:
        """Use the index as it is, whatever built it (inspection); NotFoundError when the
        store holds none, ServiceUnavailableError when it cannot be reached."""
        ...

    async def close(self) -> None: ...

    async def healthy(self) -> bool: ...


class ChunkPrimitives(Protocol):
    """Writes, deletes and reads of chunks by id, document and scope."""

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


class WholeChunks(Protocol):
    """Reads of a store whose payloads are whole chunks."""

    async def chunks(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[dict[str, Chunk]]:
        """Per (scope, ids) request: id -> chunk, for the ids held here in that scope."""
        ...

    async def document_payloads(self, scope: ScopeKey, doc_id: str) -> list[dict[str, Any]]:
        """The payloads of a document's chunks (id, order, title, metadata, source, hash)."""
        ...

    async def document_heads(
        self, scope: ScopeKey, cursor: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Up to ``limit`` payloads (``payloads.HEAD_FIELDS``) of the first chunks (order 0)
        of the scope's documents, in chunk-id order from ``cursor`` (None: the start), and
        the cursor of the next page (None after the last)."""
        ...


class StoreQueries(Protocol):
    """The strategies' searches."""

    async def query(self, queries: list[StrategyQuery]) -> list[list[Hit]]:
        """Hits per query, best first, in one round trip."""
        ...


class StoreReport(Protocol):
    """What the store reports of itself."""

    async def describe(self) -> dict[str, Any]:
        """What the store itself reports: ``store``, ``location``, ``alias``, ``physical``
        (the version behind the alias), ``versions``, ``binding`` (what it records about the
        models), ``points``, ``payload_indexes`` (field -> type), ``disk_bytes`` (None where
        the store does not report it)."""
        ...


class StoreRegistry(Protocol):
    """The registry of named collections: one record per (tenant, collection) under
    ``registry_key``, written with the store's own create-once / update-if-present / delete
    operations, so store replicas changing it at once cannot lose each other's changes."""

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


class Backend(StoreConnection, ChunkPrimitives, StoreQueries, StoreReport, Protocol):
    """The primitives of one store. ``holds_chunks``: its payloads carry the whole chunk, so
    fetch and document info read it; other backends only confirm that they hold an id.
    ``snapshots``: the store's own snapshot API, None where it has none."""

    holds_chunks: bool
    snapshots: Snapshots | None


class ChunkBackend(Backend, WholeChunks, StoreRegistry, Protocol):
    """A backend whose payloads are whole chunks; the first of a topology also holds its
    collection registry."""
