"""``/v1/collections``: named collections inside the caller's tenant, and the documents and
searches of one collection. The routes without a collection (``/v1/documents``,
``/v1/search``) address the tenant's ``default`` collection, as before.

A collection belongs to the tenant of the credential that created it: another tenant's
collection of the same name is simply not found (404), for reads, writes and searches."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from serve_app.api import deps
from serve_app.api.auth import Principal
from serve_app.api.models import (
    CollectionDeleted,
    CollectionDetail,
    CollectionIn,
    CollectionList,
    CollectionOut,
)
from serve_app.api.routers.answer import add_answer_routes
from serve_app.api.routers.documents import add_document_routes
from serve_app.api.routers.openai_compat import add_openai_routes
from serve_app.api.routers.search import add_search_routes
from serve_app.service import RetrievalService

router = APIRouter(prefix="/v1/collections")


@router.post("", response_model=CollectionOut, status_code=201)
async def create_collection(
    body: CollectionIn,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> dict[str, Any]:
    who.require("write")
    return await deps.within(seconds, service.create_collection(who.scope(body.name)))


@router.get("", response_model=CollectionList)
async def list_collections(
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> dict[str, Any]:
    who.require("read")
    found = await deps.within(seconds, service.list_collections(who.scope(None)))
    return {
        "collections": found,
        "tenant": who.tenant_id,
        "principal": who.subject,
        "scopes": sorted(who.scopes),
    }


@router.get("/{name}", response_model=CollectionDetail)
async def get_collection(
    name: str = deps.COLLECTION_NAME,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> dict[str, Any]:
    who.require("read")
    return await deps.within(seconds, service.describe_collection(who.scope(name)))


@router.delete("/{name}", response_model=CollectionDeleted)
async def delete_collection(
    name: str = deps.COLLECTION_NAME,
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.ingest_deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> CollectionDeleted:
    who.require("write")
    removed = await deps.within(seconds, service.delete_collection(who.scope(name)))
    return CollectionDeleted(deleted=name, chunks_removed=removed)


# -- documents and searches of one collection: the same handlers as the default routes --
named_router = APIRouter(prefix="/v1/collections/{name}")
add_document_routes(named_router, deps.named_collection)
add_search_routes(named_router, deps.named_collection)
add_answer_routes(named_router, deps.named_collection)
add_openai_routes(named_router, deps.named_collection)
