"""The use cases that need only the index: a tenant's collections (the registry), its
documents' records and removal, and what the stores hold. ``RetrievalService`` builds on it;
the CLI uses it alone over the configured stores, with no model loaded."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from serve_app.config import AppConfig
from serve_app.errors import (
    InvalidInputError,
    NotFoundError,
    TenantQuotaError,
)
from serve_app.pipelines.scopes import existing_collection
from serve_app.schemas import (
    DEFAULT_COLLECTION,
    DOCUMENT_PAGE_MAX,
    DocumentCursor,
    DocumentInfo,
    DocumentPage,
    ScopeKey,
)
from serve_app.stores.base import ServedIndex

CURSOR: TypeAdapter[str] = TypeAdapter(DocumentCursor)


class CollectionService:
    """Every method takes the ``ScopeKey`` its caller resolved (a tenant's: ``collection``
    None; one collection's: ``existing`` confirms a named one)."""

    def __init__(self, index: ServedIndex, config: AppConfig) -> None:
        self.index = index
        self.config = config

    async def existing(self, key: ScopeKey) -> ScopeKey:
        """``key``, once its collection is known to exist; NotFoundError for one its tenant
        lacks (another tenant's collection of the same name included); only a named one is
        looked up, once. Every door resolves a request's scope here before it acts."""
        return await existing_collection(self.index, key)

    async def get_document(self, key: ScopeKey, doc_id: str) -> DocumentInfo:
        info = await self.index.document_info(key, doc_id)
        if info is None:
            raise NotFoundError(f"document {doc_id!r} not found")
        return info

    async def list_documents(
        self, key: ScopeKey, cursor: str | None = None, limit: int = 100
    ) -> DocumentPage:
        """A page of the collection's documents; the cursor and the page size are checked
        here for every door (the HTTP route declares the same types)."""
        if not 1 <= limit <= DOCUMENT_PAGE_MAX:
            raise InvalidInputError(f"limit must be 1 to {DOCUMENT_PAGE_MAX}, not {limit}")
        if cursor is not None:
            try:
                CURSOR.validate_python(cursor)
            except ValidationError:
                raise InvalidInputError("cursor is not a next_cursor this service gave") from None
        return await self.index.list_documents(key, cursor, limit)

    async def delete_document(self, key: ScopeKey, doc_id: str) -> int:
        removed = await self.index.delete_document(key, doc_id)
        if removed == 0:
            raise NotFoundError(f"document {doc_id!r} not found")
        return removed

    async def list_collections(self, tenant: ScopeKey) -> list[dict[str, Any]]:
        return await self.index.list_collections(ScopeKey(tenant.tenant))

    async def create_collection(self, key: ScopeKey) -> dict[str, Any]:
        """A new named collection, within its tenant's ``api.tenants.max_collections``
        (two creates racing at the limit may both pass: the quota bounds, it does not
        count exactly)."""
        most = self.config.api.tenants.max_collections
        listed = await self.index.list_collections(ScopeKey(key.tenant))
        held = {c["name"] for c in listed} - {DEFAULT_COLLECTION}  # the implicit one is free
        if len(held) >= most and key.collection not in held:
            raise TenantQuotaError(
                f"tenant {key.tenant!r} already has {len(held)} collections "
                f"(api.tenants.max_collections {most}); delete one first"
            )
        return await self.index.create_collection(key)

    async def describe_collection(self, key: ScopeKey) -> dict[str, Any]:
        """The collection with its chunk and document counts per store."""
        await self.existing(key)
        report = await self.index.inspect(key)
        name = key.collection
        listed = {c["name"]: c for c in await self.list_collections(key)}
        counts: dict[str, Any] = next(
            (c for c in report["collections"] if c["collection"] == name),
            {"chunks": {}, "documents": {}, "models": None},
        )
        return {
            **listed[name],
            "chunks": counts["chunks"],
            "documents": counts["documents"],
            "models": counts["models"],
        }

    async def delete_collection(self, key: ScopeKey) -> int:
        return await self.index.delete_collection(key)

    async def inspect(self, selector: ScopeKey | None = None) -> dict[str, Any]:
        """What the stores hold (``StoreIndex.inspect``): everything, one tenant's
        (``collection`` None) or one collection's, with the topology's name."""
        report = await self.index.inspect(selector)
        return {"topology": self.config.stores.topology, **report}
