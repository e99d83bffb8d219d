"""A store backend composed of collaborators: each takes the store's connection (the client,
the alias and its versions, or the embedded shard) and does one part of the ``ChunkBackend``
protocol (chunks, queries, the collection registry, what the store reports). Each method
below names the collaborator that does it; a collaborator reaches another part only through
what it was given, never through a shared ``self``."""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from serve_app.schemas import Chunk, ScopeKey
from serve_app.stores.protocols import (
    ChunkPrimitives,
    Snapshots,
    StoreConnection,
    StoreQueries,
    StoreRegistry,
    StoreReport,
    WholeChunks,
)
from serve_app.stores.values import (
    DocumentStates,
    DocumentWrite,
    Hit,
    IndexModels,
    StrategyQuery,
)

C = TypeVar("C", bound=StoreConnection)


class ChunkParts(ChunkPrimitives, WholeChunks, Protocol):
    """The chunk collaborator's protocol: both chunk parts."""


class ComposedBackend(Generic[C]):
    """``connection`` and its collaborators, as one ``ChunkBackend``."""

    holds_chunks = True

    def __init__(
        self,
        connection: C,
        chunks: ChunkParts,
        queries: StoreQueries,
        registry: StoreRegistry,
        report: StoreReport,
    ) -> None:
        self.connection = connection
        self.name = connection.name
        self.strategies = connection.strategies
        self.chunk_part = chunks
        self.query_part = queries
        self.registry_part = registry
        self.report_part = report
        self.snapshots: Snapshots | None = report if isinstance(report, Snapshots) else None

    # -- the connection ------------------------------------------------------------------
    async def open(self, models: IndexModels) -> None:
        await self.connection.open(models)

    async def attach(self) -> None:
        await self.connection.attach()

    async def close(self) -> None:
        await self.connection.close()

    async def healthy(self) -> bool:
        return await self.connection.healthy()

    # -- chunks --------------------------------------------------------------------------
    async def upsert(self, scope: ScopeKey, writes: list[DocumentWrite]) -> None:
        await self.chunk_part.upsert(scope, writes)

    async def delete_ids(self, scope: ScopeKey, chunk_ids: list[str]) -> None:
        await self.chunk_part.delete_ids(scope, chunk_ids)

    async def delete_documents(self, scope: ScopeKey, doc_ids: list[str]) -> int:
        return await self.chunk_part.delete_documents(scope, doc_ids)

    async def delete_scope(self, scope: ScopeKey) -> int:
        return await self.chunk_part.delete_scope(scope)

    async def chunk_ids(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, set[str]]:
        return await self.chunk_part.chunk_ids(scope, doc_ids)

    async def document_states(self, scope: ScopeKey, doc_ids: list[str]) -> DocumentStates:
        return await self.chunk_part.document_states(scope, doc_ids)

    async def present(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[set[str]]:
        return await self.chunk_part.present(requests)

    async def count(self, scope: ScopeKey | None) -> int:
        return await self.chunk_part.count(scope)

    async def scroll_payloads(
        self, scope: ScopeKey | None, fields: list[str] | None, offset: Any, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
        return await self.chunk_part.scroll_payloads(scope, fields, offset, limit)

    async def chunks(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[dict[str, Chunk]]:
        return await self.chunk_part.chunks(requests)

    async def document_payloads(self, scope: ScopeKey, doc_id: str) -> list[dict[str, Any]]:
        return await self.chunk_part.document_payloads(scope, doc_id)

    async def document_heads(
        self, scope: ScopeKey, cursor: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        return await self.chunk_part.document_heads(scope, cursor, limit)

    # -- queries and the store's report --------------------------------------------------
    async def query(self, queries: list[StrategyQuery]) -> list[list[Hit]]:
        return await self.query_part.query(queries)

    async def describe(self) -> dict[str, Any]:
        return await self.report_part.describe()

    # -- the collection registry ---------------------------------------------------------
    async def open_registry(self) -> None:
        await self.registry_part.open_registry()

    async def registry_records(self, tenant_id: str | None) -> list[dict[str, Any]]:
        return await self.registry_part.registry_records(tenant_id)

    async def registry_record(self, key: str) -> dict[str, Any] | None:
        return await self.registry_part.registry_record(key)

    async def insert_registry_record(self, key: str, record: dict[str, Any]) -> bool:
        return await self.registry_part.insert_registry_record(key, record)

    async def update_registry_record(self, key: str, fields: dict[str, Any]) -> bool:
        return await self.registry_part.update_registry_record(key, fields)

    async def drop_registry_record(self, key: str) -> None:
        await self.registry_part.drop_registry_record(key)
