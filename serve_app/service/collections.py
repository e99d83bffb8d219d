"""The use cases that need only the index: a tenant's collections (the registry), its
documents' records and removal, and what the stores hold. ``RetrievalService`` builds on it;
the CLI uses it alone over the configured stores, with no model loaded."""

from __future__ import annotations

from typing import Any

from serve_app.config import AppConfig
from serve_app.errors import NotFoundError, collection_not_found
from serve_app.schemas import DocumentInfo
from serve_app.stores.base import ChunkIndex, ScopeKey


class CollectionService:
    def __init__(self, index: ChunkIndex, config: AppConfig) -> None:
        self.index = index
        self.config = config

    async def scope(self, tenant_id: str, collection: str) -> ScopeKey:
        """The store scope of the tenant's collection; NotFoundError for one it lacks (another
        tenant's collection of the same name included); only a named one is looked up, once.
        Every door resolves a request's scope here before it acts."""
        key = ScopeKey(tenant_id, collection)
        if not key.is_default and not await self.index.has_collection(key):
            raise collection_not_found(collection)
        return key

    async def get_document(self, key: ScopeKey, doc_id: str) -> DocumentInfo:
        info = await self.index.document_info(key, doc_id)
        if info is None:
            raise NotFoundError(f"document {doc_id!r} not found")
        return info

    async def delete_document(self, key: ScopeKey, doc_id: str) -> int:
        removed = await self.index.delete_document(key, doc_id)
        if removed == 0:
            raise NotFoundError(f"document {doc_id!r} not found")
        return removed

    async def list_collections(self, tenant_id: str) -> list[dict]:
        return await self.index.list_collections(ScopeKey(tenant_id))

    async def create_collection(self, tenant_id: str, name: str) -> dict:
        return await self.index.create_collection(ScopeKey(tenant_id, name))

    async def describe_collection(self, tenant_id: str, name: str) -> dict:
        """The collection with its chunk and document counts per store."""
        key = await self.scope(tenant_id, name)
        report = await self.index.inspect(key)
        listed = {c["name"]: c for c in await self.list_collections(tenant_id)}
        counts = next(
            (c for c in report["collections"] if c["collection"] == name),
            {"chunks": {}, "documents": {}, "models": None},
        )
        return {
            **listed[name],
            "chunks": counts["chunks"],
            "documents": counts["documents"],
            "models": counts["models"],
        }

    async def delete_collection(self, tenant_id: str, name: str) -> int:
        return await self.index.delete_collection(ScopeKey(tenant_id, name))

    async def inspect(self, tenant_id: str | None, collection: str | None) -> dict[str, Any]:
        selector = None if tenant_id is None else ScopeKey(tenant_id, collection)
        report = await self.index.inspect(selector)
        return {"topology": self.config.stores.topology, **report}
