"""The Ray store seam, both sides in one file: ``ServedOnReplica``, the store deployment's
methods (one per ``ServedIndex`` method, each calling the replica's own index), and
``RemoteIndex``, the same methods called through the deployment's handle by the ingress.

Only ``ServedIndex`` crosses (what the application service calls: ``ServingIndex``,
``CollectionRegistry``, ``IndexReport``), with the batched retrieve of
``deployments/replicas/store.py``. The one-query reads of ``IndexMaintenance`` run in process,
next to a ``StoreIndex``. Every method is typed and named as in the protocol (nothing is
dispatched by a name a type checker cannot see): a new served operation adds one method to
each class here and nothing elsewhere in ``deployments/``.
"""

from __future__ import annotations

from typing import Any, cast

from ray.serve.handle import DeploymentHandle

from deployments.replicas.handles import call
from serve_app.model_info import StoreInfo
from serve_app.schemas import Chunk, DocumentInfo, DocumentPage, ScopeKey, Strategy
from serve_app.stores.base import DocumentWrite, Hit, IndexModels, SearchQuery, ServedIndex


class ServedOnReplica:
    """The store deployment's ``ServedIndex`` methods; ``open`` and ``close`` belong to the
    replica (it opens at start and closes at shutdown)."""

    index: ServedIndex

    async def healthy(self) -> bool:
        return await self.index.healthy()

    async def write_documents(self, scope: ScopeKey, writes: list[DocumentWrite]) -> int:
        return await self.index.write_documents(scope, writes)

    async def delete_document(self, scope: ScopeKey, doc_id: str) -> int:
        return await self.index.delete_document(scope, doc_id)

    async def document_hashes(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, str]:
        return await self.index.document_hashes(scope, doc_ids)

    async def document_info(self, scope: ScopeKey, doc_id: str) -> DocumentInfo | None:
        return await self.index.document_info(scope, doc_id)

    async def list_documents(
        self, scope: ScopeKey, cursor: str | None, limit: int
    ) -> DocumentPage:
        return await self.index.list_documents(scope, cursor, limit)

    async def search_batch(self, queries: list[SearchQuery]) -> list[dict[str, list[Hit]]]:
        return await self.index.search_batch(queries)

    async def fetch_batch(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[list[Chunk]]:
        return await self.index.fetch_batch(requests)

    async def has_collection(self, key: ScopeKey) -> bool:
        return await self.index.has_collection(key)

    async def list_collections(self, tenant: ScopeKey) -> list[dict[str, Any]]:
        return await self.index.list_collections(tenant)

    async def create_collection(self, key: ScopeKey) -> dict[str, Any]:
        return await self.index.create_collection(key)

    async def delete_collection(self, key: ScopeKey) -> int:
        return await self.index.delete_collection(key)

    async def count(self, scope: ScopeKey | None = None) -> int:
        return await self.index.count(scope)

    async def inspect(self, selector: ScopeKey | None = None) -> dict[str, Any]:
        return await self.index.inspect(selector)


class RemoteIndex:
    """``ServedIndex`` over the store deployment: each method calls the deployment's method
    of the same name (``ServedOnReplica``) with the same types."""

    def __init__(self, handle: DeploymentHandle[Any], info: StoreInfo) -> None:
        self.handle = handle
        self.strategies: tuple[Strategy, ...] = tuple(info.strategies)

    async def open(self, models: IndexModels) -> None:
        """Replicas open themselves at start; this checks they did so for ``models``."""
        await call("store", self.handle.open.remote(models))

    async def close(self) -> None:
        """The store deployment owns the index and closes it itself."""

    async def healthy(self) -> bool:
        return cast(bool, await call("store", self.handle.healthy.remote()))

    async def write_documents(self, scope: ScopeKey, writes: list[DocumentWrite]) -> int:
        return cast(int, await call("store", self.handle.write_documents.remote(scope, writes)))

    async def delete_document(self, scope: ScopeKey, doc_id: str) -> int:
        return cast(int, await call("store", self.handle.delete_document.remote(scope, doc_id)))

    async def document_hashes(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, str]:
        return cast(
            dict[str, str], await call("store", self.handle.document_hashes.remote(scope, doc_ids))
        )

    async def document_info(self, scope: ScopeKey, doc_id: str) -> DocumentInfo | None:
        return cast(
            DocumentInfo | None,
            await call("store", self.handle.document_info.remote(scope, doc_id)),
        )

    async def list_documents(
        self, scope: ScopeKey, cursor: str | None, limit: int
    ) -> DocumentPage:
        page = await call("store", self.handle.list_documents.remote(scope, cursor, limit))
        return cast(DocumentPage, page)

    async def search_batch(self, queries: list[SearchQuery]) -> list[dict[str, list[Hit]]]:
        return cast(
            list[dict[str, list[Hit]]],
            await call("store", self.handle.search_batch.remote(queries)),
        )

    async def fetch_batch(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[list[Chunk]]:
        return cast(
            list[list[Chunk]], await call("store", self.handle.fetch_batch.remote(requests))
        )

    async def has_collection(self, key: ScopeKey) -> bool:
        return cast(bool, await call("store", self.handle.has_collection.remote(key)))

    async def list_collections(self, tenant: ScopeKey) -> list[dict[str, Any]]:
        return cast(
            list[dict[str, Any]], await call("store", self.handle.list_collections.remote(tenant))
        )

    async def create_collection(self, key: ScopeKey) -> dict[str, Any]:
        return cast(dict[str, Any], await call("store", self.handle.create_collection.remote(key)))

    async def delete_collection(self, key: ScopeKey) -> int:
        return cast(int, await call("store", self.handle.delete_collection.remote(key)))

    async def count(self, scope: ScopeKey | None = None) -> int:
        return cast(int, await call("store", self.handle.count.remote(scope)))

    async def inspect(self, selector: ScopeKey | None = None) -> dict[str, Any]:
        return cast(dict[str, Any], await call("store", self.handle.inspect.remote(selector)))
