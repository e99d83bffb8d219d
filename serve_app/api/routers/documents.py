"""Documents of a collection: upload (JSON or multipart files), list, read and delete, each
under a deadline. ``add_document_routes`` puts the same handlers under ``/v1/documents`` (the
tenant's ``default`` collection) and ``/v1/collections/{name}/documents``: one handler per
operation, so the two can never differ.

The upload takes the raw request: the principal and the collection (the scope) are checked
before a body byte is read, and the body is read (under ``api.max_request_bytes``) inside the
deadline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from serve_app.api import deps
from serve_app.api.models import DeleteResponse, IngestResponse
from serve_app.api.observability import Metrics
from serve_app.api.uploads import read_documents
from serve_app.loaders.pool import LoaderPool
from serve_app.schemas import (
    DOCUMENT_PAGE_MAX,
    DocumentCursor,
    DocumentInfo,
    DocumentPage,
    ScopeKey,
)
from serve_app.service import RetrievalService
from serve_app.service.tenant_limits import TenantRates

UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/IngestRequest"}},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "files": {"type": "array", "items": {"type": "string", "format": "binary"}}
                    },
                    "required": ["files"],
                }
            },
        },
    }
}


def add_document_routes(router: APIRouter, collection: Callable[..., Any]) -> None:
    """The document operations under ``router``, for the collection that the dependency
    ``collection`` names (None: the tenant's ``default`` collection), its scope resolved once
    (``deps.scope_key``) before a body byte is read."""
    readable = deps.scope_key(collection, "read")
    writable = deps.scope_key(collection, "write")

    @router.post("/documents", response_model=IngestResponse, openapi_extra=UPLOAD_BODY)
    async def ingest_documents(
        request: Request,
        key: ScopeKey = Depends(writable),
        seconds: float = Depends(deps.ingest_deadline_s),
        service: RetrievalService = Depends(deps.service),
        loaders: LoaderPool = Depends(deps.loaders),
        metrics: Metrics = Depends(deps.metrics),
        rates: TenantRates = Depends(deps.tenant_rates),
    ) -> IngestResponse:
        async def upload() -> IngestResponse:
            documents = await read_documents(request, service.config, loaders)
            rates.upload(key.tenant, documents)  # before any chunking or encoding
            result = await service.ingest(key, documents)
            metrics.observe_stages("ingest", result.timings_ms)
            return IngestResponse.model_validate(result.model_dump())

        return await deps.within(seconds, upload())

    @router.get("/documents", response_model=DocumentPage)
    async def list_documents(
        key: ScopeKey = Depends(readable),
        limit: int = Query(100, ge=1, le=DOCUMENT_PAGE_MAX),
        cursor: DocumentCursor | None = Query(None, description="a page's next_cursor"),
        seconds: float = Depends(deps.deadline_s),
        service: RetrievalService = Depends(deps.service),
    ) -> DocumentPage:
        """The collection's documents, a page at a time: pass the page's ``next_cursor`` for
        the next one."""
        return await deps.within(seconds, service.list_documents(key, cursor, limit))

    @router.get("/documents/{doc_id:path}", response_model=DocumentInfo)
    async def get_document(
        doc_id: str,
        key: ScopeKey = Depends(readable),
        seconds: float = Depends(deps.deadline_s),
        service: RetrievalService = Depends(deps.service),
    ) -> DocumentInfo:
        return await deps.within(seconds, service.get_document(key, doc_id))

    @router.delete("/documents/{doc_id:path}", response_model=DeleteResponse)
    async def delete_document(
        doc_id: str,
        key: ScopeKey = Depends(writable),
        seconds: float = Depends(deps.deadline_s),
        service: RetrievalService = Depends(deps.service),
    ) -> DeleteResponse:
        removed = await deps.within(seconds, service.delete_document(key, doc_id))
        return DeleteResponse(deleted=doc_id, chunks_removed=removed)
