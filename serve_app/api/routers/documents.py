"""Documents of a collection: upload (JSON or multipart files), read and delete, each under a
deadline. ``add_document_routes`` puts the same handlers under ``/v1/documents`` (the
tenant's ``default`` collection) and ``/v1/collections/{name}/documents``: one handler per
operation, so the two can never differ.

The upload takes the raw request: the principal and the collection are checked before a
body byte is read, and the body is read (under ``api.max_request_bytes``) inside the
deadline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request

from serve_app.api import deps
from serve_app.api.auth import Principal
from serve_app.api.models import DeleteResponse, IngestResponse
from serve_app.api.observability import Metrics
from serve_app.api.uploads import read_documents
from serve_app.loaders.pool import LoaderPool
from serve_app.schemas import DEFAULT_COLLECTION, DocumentInfo
from serve_app.service import RetrievalService

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
    ``collection`` names (None: the tenant's ``default`` collection)."""

    @router.post("/documents", response_model=IngestResponse, openapi_extra=UPLOAD_BODY)
    async def ingest_documents(
        request: Request,
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        seconds: float = Depends(deps.ingest_deadline_s),
        service: RetrievalService = Depends(deps.service),
        loaders: LoaderPool = Depends(deps.loaders),
        metrics: Metrics = Depends(deps.metrics),
    ) -> IngestResponse:
        who.require("write")

        async def upload() -> IngestResponse:
            if name is not None:
                await service.scope(who.tenant_id, name)  # before reading a byte of the body
            documents = await read_documents(request, who.tenant_id, service.config, loaders)
            if name is not None:
                documents = [d.model_copy(update={"collection": name}) for d in documents]
            result = await service.ingest(documents)
            metrics.observe_stages("ingest", result.timings_ms)
            return IngestResponse.model_validate(result.model_dump())

        return await deps.within(seconds, upload())

    @router.get("/documents/{doc_id:path}", response_model=DocumentInfo)
    async def get_document(
        doc_id: str,
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        seconds: float = Depends(deps.deadline_s),
        service: RetrievalService = Depends(deps.service),
    ) -> DocumentInfo:
        who.require("read")
        found = service.get_document(who.tenant_id, doc_id, name or DEFAULT_COLLECTION)
        return await deps.within(seconds, found)

    @router.delete("/documents/{doc_id:path}", response_model=DeleteResponse)
    async def delete_document(
        doc_id: str,
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        seconds: float = Depends(deps.deadline_s),
        service: RetrievalService = Depends(deps.service),
    ) -> DeleteResponse:
        who.require("write")
        deleting = service.delete_document(who.tenant_id, doc_id, name or DEFAULT_COLLECTION)
        removed = await deps.within(seconds, deleting)
        return DeleteResponse(deleted=doc_id, chunks_removed=removed)
