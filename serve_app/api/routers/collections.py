"""``/v1/collections``: named collections inside the caller's tenant, and the documents and
searches of one collection. The routes without a collection (``/v1/documents``,
``/v1/search``) address the tenant's ``default`` collection, as before.

A collection belongs to the tenant of the credential that created it: another tenant's
collection of the same name is simply not found (404), for reads, writes and searches."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict

from serve_app.api import deps
from serve_app.api.auth import Principal
from serve_app.api.models import DeleteResponse, IngestResponse, SearchResponseOut
from serve_app.api.observability import Metrics
from serve_app.api.routers.documents import UPLOAD_BODY
from serve_app.api.routers.search import run_search
from serve_app.api.service import RetrievalService
from serve_app.api.uploads import read_documents
from serve_app.loaders.pool import LoaderPool
from serve_app.schemas import (
    COLLECTION_PATTERN,
    FUSION_METHODS,
    CollectionName,
    DocumentInfo,
    FusionSpec,
    SearchRequest,
)

router = APIRouter(prefix="/v1/collections")

NAME = Path(min_length=1, max_length=64, pattern=COLLECTION_PATTERN)


class CollectionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: CollectionName


class CollectionOut(BaseModel):
    name: str
    state: str
    created_at: str | None = None


class CollectionDetail(CollectionOut):
    chunks: dict[str, int]
    documents: dict[str, int]
    models: dict | None = None


class CollectionList(BaseModel):
    collections: list[CollectionOut]


class CollectionDeleted(BaseModel):
    deleted: str
    chunks_removed: int


@router.post("", response_model=CollectionOut, status_code=201)
async def create_collection(
    body: CollectionIn,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> dict:
    who.require("write")
    return await deps.within(seconds, service.create_collection(who.tenant_id, body.name))


@router.get("", response_model=CollectionList)
async def list_collections(
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> dict:
    who.require("read")
    found = await deps.within(seconds, service.list_collections(who.tenant_id))
    return {"collections": found}


@router.get("/{name}", response_model=CollectionDetail)
async def get_collection(
    name: str = NAME,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> dict:
    who.require("read")
    return await deps.within(seconds, service.describe_collection(who.tenant_id, name))


@router.delete("/{name}", response_model=CollectionDeleted)
async def delete_collection(
    name: str = NAME,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.ingest_deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> CollectionDeleted:
    who.require("write")
    removed = await deps.within(seconds, service.delete_collection(who.tenant_id, name))
    return CollectionDeleted(deleted=name, chunks_removed=removed)


# -- documents and searches of one collection ------------------------------------------------
@router.post("/{name}/documents", response_model=IngestResponse, openapi_extra=UPLOAD_BODY)
async def ingest_documents(
    request: Request,
    name: str = NAME,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.ingest_deadline_s),
    service: RetrievalService = Depends(deps.service),
    loaders: LoaderPool = Depends(deps.loaders),
    metrics: Metrics = Depends(deps.metrics),
) -> IngestResponse:
    who.require("write")

    async def upload() -> IngestResponse:
        await service.scope(who.tenant_id, name)  # before reading a byte of the body
        documents = await read_documents(request, who.tenant_id, service.config, loaders)
        documents = [d.model_copy(update={"collection": name}) for d in documents]
        result = await service.ingest(documents)
        metrics.observe_stages("ingest", result.timings_ms)
        return IngestResponse.model_validate(result.model_dump())

    return await deps.within(seconds, upload())


@router.get("/{name}/documents/{doc_id:path}", response_model=DocumentInfo)
async def get_document(
    doc_id: str,
    name: str = NAME,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> DocumentInfo:
    who.require("read")
    return await deps.within(seconds, service.get_document(who.tenant_id, doc_id, name))


@router.delete("/{name}/documents/{doc_id:path}", response_model=DeleteResponse)
async def delete_document(
    doc_id: str,
    name: str = NAME,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> DeleteResponse:
    who.require("write")
    removed = await deps.within(seconds, service.delete_document(who.tenant_id, doc_id, name))
    return DeleteResponse(deleted=doc_id, chunks_removed=removed)


@router.post("/{name}/search", response_model=SearchResponseOut)
async def search_post(
    body: SearchRequest,
    name: str = NAME,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
    metrics: Metrics = Depends(deps.metrics),
) -> SearchResponseOut:
    request = body.model_copy(update={"collection": name})
    return await run_search(request, who, seconds, service, metrics)


@router.get("/{name}/search", response_model=SearchResponseOut)
async def search_get(
    name: str = NAME,
    q: str = Query(min_length=1, max_length=4096),
    top_k: int = Query(default=10, ge=1, le=200),
    strategies: str | None = Query(
        default=None, pattern=r"^(bm25|splade|dense)(,(bm25|splade|dense))*$"
    ),
    fusion: str | None = Query(default=None, pattern="^(" + "|".join(FUSION_METHODS) + ")$"),
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
    metrics: Metrics = Depends(deps.metrics),
) -> SearchResponseOut:
    request = SearchRequest.model_validate(
        {
            "query": q,
            "collection": name,
            "top_k": top_k,
            "strategies": strategies.split(",") if strategies else None,
            "fusion": FusionSpec(method=fusion).model_dump() if fusion else None,
        }
    )
    return await run_search(request, who, seconds, service, metrics)
