"""``/v1/documents``: upload (JSON or multipart files), read and delete, each under a deadline.

The upload takes the raw request: the principal and its scope are checked before a body
byte is read, and the body is read (under ``api.max_request_bytes``) inside the deadline."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from serve_app.api import deps
from serve_app.api.auth import Principal
from serve_app.api.models import DeleteResponse, IngestResponse
from serve_app.api.observability import Metrics
from serve_app.api.service import RetrievalService
from serve_app.api.uploads import read_documents
from serve_app.loaders.pool import LoaderPool
from serve_app.schemas import DocumentInfo

router = APIRouter(prefix="/v1/documents")

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


@router.post("", response_model=IngestResponse, openapi_extra=UPLOAD_BODY)
async def ingest_documents(
    request: Request,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.ingest_deadline_s),
    service: RetrievalService = Depends(deps.service),
    loaders: LoaderPool = Depends(deps.loaders),
    metrics: Metrics = Depends(deps.metrics),
) -> IngestResponse:
    who.require("write")

    async def upload() -> IngestResponse:
        documents = await read_documents(request, who.tenant_id, service.config, loaders)
        result = await service.ingest(documents)
        metrics.observe_stages("ingest", result.timings_ms)
        return IngestResponse.model_validate(result.model_dump())

    return await deps.within(seconds, upload())


@router.get("/{doc_id:path}", response_model=DocumentInfo)
async def get_document(
    doc_id: str,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> DocumentInfo:
    who.require("read")
    return await deps.within(seconds, service.get_document(who.tenant_id, doc_id))


@router.delete("/{doc_id:path}", response_model=DeleteResponse)
async def delete_document(
    doc_id: str,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> DeleteResponse:
    who.require("write")
    removed = await deps.within(seconds, service.delete_document(who.tenant_id, doc_id))
    return DeleteResponse(deleted=doc_id, chunks_removed=removed)
