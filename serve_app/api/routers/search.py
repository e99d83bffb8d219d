"""Hybrid search in a collection, by JSON body (POST) or query string (GET).
``add_search_routes`` puts the same handlers under ``/v1/search`` (the tenant's ``default``
collection) and ``/v1/collections/{name}/search``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Query

from serve_app.api import deps
from serve_app.api.auth import Principal
from serve_app.api.models import SearchResponseOut
from serve_app.api.observability import Metrics
from serve_app.schemas import FUSION_METHODS, SearchRequest, SearchResponse
from serve_app.service import RetrievalService


async def run_search(
    request: SearchRequest,
    who: Principal,
    seconds: float,
    service: RetrievalService,
    metrics: Metrics,
) -> SearchResponseOut:
    who.require("read")
    response: SearchResponse = await deps.within(
        seconds, service.search(request, who.scope(request.collection))
    )
    metrics.observe_stages("search", response.timings_ms)
    return SearchResponseOut.from_response(response)


def add_search_routes(router: APIRouter, collection: Callable[..., Any]) -> None:
    """The search operations under ``router``, for the collection ``collection`` names; a
    body's own ``collection`` field is honoured on the default route only."""

    @router.post("/search", response_model=SearchResponseOut)
    async def search_post(
        body: SearchRequest,
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        seconds: float = Depends(deps.deadline_s),
        service: RetrievalService = Depends(deps.service),
        metrics: Metrics = Depends(deps.metrics),
    ) -> SearchResponseOut:
        request = body if name is None else body.model_copy(update={"collection": name})
        return await run_search(request, who, seconds, service, metrics)

    @router.get("/search", response_model=SearchResponseOut)
    async def search_get(
        q: str = Query(min_length=1, max_length=4096),
        top_k: int = Query(default=10, ge=1, le=200),
        strategies: str | None = Query(
            default=None, pattern=r"^(bm25|splade|dense)(,(bm25|splade|dense))*$"
        ),
        fusion: str | None = Query(default=None, pattern="^(" + "|".join(FUSION_METHODS) + ")$"),
        rerank: bool | None = None,
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        seconds: float = Depends(deps.deadline_s),
        service: RetrievalService = Depends(deps.service),
        metrics: Metrics = Depends(deps.metrics),
    ) -> SearchResponseOut:
        request = SearchRequest.model_validate(
            {
                "query": q,
                "top_k": top_k,
                "strategies": strategies.split(",") if strategies else None,
                "fusion": {"method": fusion} if fusion else None,
                "rerank": rerank,
                **({"collection": name} if name is not None else {}),
            }
        )
        return await run_search(request, who, seconds, service, metrics)
